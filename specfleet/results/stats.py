"""Small statistics without scipy: Welch's t-test with the exact Student-t CDF.

The two-sided p-value of t with df degrees of freedom is the regularized
incomplete beta function I_x(df/2, 1/2) at x = df / (df + t^2), evaluated with
the Lentz continued fraction (Numerical Recipes, `betacf`). Accurate to ~1e-10
for the df (>= 1, fractional allowed) that Welch's formula yields.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


def _betacf(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    bt = math.exp(lbt)
    if x < (a + 1.0) / (a + b + 2.0):
        return bt * _betacf(a, b, x) / a
    return 1.0 - bt * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with df degrees of freedom."""
    if math.isinf(t):
        return 0.0
    if math.isnan(t) or df <= 0:
        return math.nan
    return betainc(df / 2.0, 0.5, df / (df + t * t))


@dataclass
class WelchResult:
    t: float
    df: float
    p: float


def welch(a: list[float], b: list[float]) -> WelchResult | None:
    """Welch's unequal-variance t-test; None when a side has < 2 samples.

    Both variances zero: p = 0 if the means differ (deterministic difference),
    1 if they are equal.
    """
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    va, vb = statistics.variance(a), statistics.variance(b)
    sa, sb = va / len(a), vb / len(b)
    se2 = sa + sb
    if se2 == 0:
        return WelchResult(math.inf if ma != mb else 0.0, math.inf, 0.0 if ma != mb else 1.0)
    t = (ma - mb) / math.sqrt(se2)
    df = se2 * se2 / ((sa * sa) / (len(a) - 1) + (sb * sb) / (len(b) - 1))
    return WelchResult(t, df, t_two_sided_p(t, df))
