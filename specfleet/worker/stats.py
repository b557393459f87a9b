"""Small statistics without scipy, those the crossover search runs on the worker (the report imports
them too): Student's t (CDF, quantile), the interval of a ratio of means (Welch on log values) and
Wilson's interval of a proportion. The report's own tests (TOST, Newcombe's difference) live with
their users (report/gates/gate.py, report/compare/comparison.py).

The two-sided p of t is the regularized incomplete beta I_x(df/2, 1/2) at x = df / (df + t^2), by
Lentz's continued fraction (Numerical Recipes, `betacf`): ~1e-10 for the df (>= 1, fractional) that
Welch's formula yields; the quantile inverts it by bisection. tests/report/test_equivalence.py
checks both against scipy.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

SPEEDUP_CONFIDENCE = 0.95  # the report's interval and the crossover search's (the one default)


def _betacf(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        # the even step, then the odd one, of the continued fraction
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
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


def t_quantile(q: float, df: float) -> float:
    """The q-quantile of Student's t (0 < q < 1): P(T <= x) = q. df > 1e7 (or inf): the normal's."""
    if not 0.0 < q < 1.0:
        raise ValueError("q must be in (0, 1)")
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -t_quantile(1.0 - q, df)
    target = 2.0 * (1.0 - q)  # two-sided p of the quantile
    if df > 1e7:  # the normal limit; the continued fraction loses digits at huge df
        return statistics.NormalDist().inv_cdf(q)
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > target:
        hi *= 2.0
    for _ in range(200):  # bisection: p(t) decreases monotonically in t
        mid = (lo + hi) / 2.0
        if t_two_sided_p(mid, df) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2.0


@dataclass
class RatioInterval:
    """mean(b) / mean(a) as the ratio of geometric means, with its confidence interval.

    Welch's t on log values: the estimate is exp(mean(log b) - mean(log a)); the interval
    exp(d +- t_q * se) with se^2 = var(log a)/na + var(log b)/nb and Welch-Satterthwaite df.
    Swapping a and b inverts the ratio and the interval exactly (symmetric in the samples).
    """
    ratio: float
    low: float
    high: float
    df: float
    confidence: float


def geometric_ratio(base: list[float], cfg: list[float]) -> float:
    """exp(mean log cfg - mean log base): the speedup's point, the centre of ratio_interval's log-scale
    interval (NaN when a value is not positive: no log)."""
    if not base or not cfg or min(base + cfg) <= 0:
        return math.nan
    return math.exp(sum(map(math.log, cfg)) / len(cfg) - sum(map(math.log, base)) / len(base))


def log_welch(a: list[float], b: list[float]) -> tuple[float, float, float] | None:
    """(mean log b - mean log a, its squared standard error, Welch-Satterthwaite df), or None when
    a side has < 2 samples or any value <= 0 (no log, no spread). df is inf when se2 is 0."""
    if len(a) < 2 or len(b) < 2 or min(a) <= 0 or min(b) <= 0:
        return None
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    d = statistics.fmean(lb) - statistics.fmean(la)
    sa, sb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    se2 = sa + sb
    if se2 == 0:
        return d, 0.0, math.inf
    return d, se2, se2 * se2 / ((sa * sa) / (len(la) - 1) + (sb * sb) / (len(lb) - 1))


def ratio_interval(a: list[float], b: list[float], confidence: float) -> RatioInterval | None:
    """None when a side has < 2 samples or any value <= 0 (no log, no spread)."""
    w = log_welch(a, b)
    if w is None:
        return None
    d, se2, df = w
    if se2 == 0:  # no spread at all: the interval is the point
        r = math.exp(d)
        return RatioInterval(r, r, r, math.inf, confidence)
    half = t_quantile(1.0 - (1.0 - confidence) / 2.0, df) * math.sqrt(se2)
    return RatioInterval(math.exp(d), math.exp(d - half), math.exp(d + half), df, confidence)


# ---------------------------------------------------------------- proportions (goodput's SLO attainment)
def wilson_interval(k: int, n: int, confidence: float) -> tuple[float, float]:
    """Wilson's score interval of the proportion k / n (n > 0). Unlike a log or normal interval it
    is defined at k = 0 and k = n and stays inside [0, 1]: the interval for a goodput of zero."""
    z = statistics.NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)
