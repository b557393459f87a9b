"""`fab compare`'s decision rule in one place (docs/compare.md, "The verdict"), pure: samples in, verdicts out.

What a cell is judged on: what users feel, each a regression on its own: output throughput, TTFT and
the per-token metric (closed-loop cells); at a set request rate the throughput is the offered load
for both sides, so an open-loop cell is judged on TTFT and the per-token metric (and goodput, with an
SLO). `--metric` narrows it.

Each judged figure is a one-sided test on log values (Welch's t) of "the candidate is no worse than
the tolerance band allows"; the family of every such test of one comparison (cells x metrics,
speedups, goodput, SLO attainment) is corrected by Holm's step-down at FAMILY_ALPHA, so the chance
that two campaigns with no change beyond the tolerance report any regression is <= FAMILY_ALPHA
(Holm 1979: under any dependence between the tests). A single run on a side has no noise estimate:
no test, the figure is UNDECIDABLE (its own exit code), unless the user accepts the plain threshold
and the false-alarm rate single_run_false_alarm states. Each tested figure says the change it would
have found with POWER at its noise (detectable_change). benchmarks/compare_power.py measures the
rates through these functions.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .measures import NoiseBand
from ...worker.stats import log_welch, t_two_sided_p, t_quantile

FAMILY_ALPHA = 0.05   # family-wise false-alarm rate over every regression test of one comparison
POWER = 0.80          # the power at which a figure's detectable change is stated
THROUGHPUT = "output_throughput"
TTFT = "mean_ttft_ms"
PER_TOKEN = ("tpot_weighted_ms", "mean_tpot_ms", "mean_itl_ms")
DEFAULT_PER_TOKEN = "tpot_weighted_ms"
LOWER_IS_BETTER = {"mean_tpot_ms", "mean_itl_ms", "mean_ttft_ms", "tpot_weighted_ms"}
UNDECIDABLE = "undecidable: 1 run"
SINGLE_RUN_NOISES = (0.01, 0.02, 0.05)   # run noise (CV) at which the plain threshold's false alarms are stated


def judged_metrics(plan_metric: str | None, narrowed: list[str] | None, open_loop: bool) -> list[str]:
    """The metrics a cell is judged on: `narrowed` (--metric) when given, else throughput, TTFT and the
    per-token metric (the plan's equivalence.metric when it is one, else the token-weighted TPOT); an
    open-loop cell never on throughput (it is the offered load)."""
    if narrowed:
        out = list(narrowed)
    else:
        out = [THROUGHPUT, TTFT, plan_metric if plan_metric in PER_TOKEN else DEFAULT_PER_TOKEN]
    return [m for m in out if not (open_loop and m in (THROUGHPUT, "total_token_throughput"))]


def t_cdf(x: float, df: float) -> float:
    """P(T <= x) for Student's t (df inf: the normal's)."""
    if math.isinf(df):
        return statistics.NormalDist().cdf(x)
    half = t_two_sided_p(x, df) / 2.0
    return 1.0 - half if x > 0 else half


@dataclass(frozen=True)
class OneSided:
    """A figure's two one-sided tests against the tolerance band, on the log of candidate / baseline
    turned so that up is better: p_worse tests H0 "no worse than 1/(1+tol)", p_better "no better than
    1+tol". se (of the log ratio) and df give its power."""
    p_worse: float
    p_better: float
    se: float
    df: float


def one_sided(d: float, se2: float, df: float, tolerance_pct: float, better_up: bool) -> OneSided:
    """From the log ratio d (candidate / baseline), its squared standard error and degrees of freedom."""
    d = d if better_up else -d
    edge = math.log1p(tolerance_pct / 100.0)
    if se2 == 0:   # no spread: the point decides
        return OneSided(0.0 if d < -edge else 1.0, 0.0 if d > edge else 1.0, 0.0, math.inf)
    se = math.sqrt(se2)
    return OneSided(t_cdf((d + edge) / se, df), 1.0 - t_cdf((d - edge) / se, df), se, df)


def ratio_test(a: list[float], b: list[float], tolerance_pct: float, better_up: bool) -> OneSided | None:
    """The tests of mean(b) / mean(a) on log values (Welch); None when a side has one run (no noise)."""
    w = log_welch(a, b)
    return None if w is None else one_sided(*w, tolerance_pct, better_up)


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order: reject where adjusted <= alpha."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out, running = [1.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def detectable_change(test: OneSided, tolerance_pct: float, family: int, better_up: bool = True,
                      alpha: float = FAMILY_ALPHA, power: float = POWER) -> float:
    """The true change in the worse direction the test finds with `power` at its noise, as a fraction:
    a drop for what is better up (0.12: throughput 12 % lower), a rise for a latency (0.12: 12 %
    higher). On log values the shift is log(1+tol) + (t_{1-alpha/m} + t_power) x se, at Holm's
    strictest level alpha / family (one true regression among the family is found at least this
    often; the usual normal-shift approximation of the noncentral t)."""
    k = 0.0 if test.se == 0 else t_quantile(1.0 - alpha / max(family, 1), test.df) + t_quantile(power, test.df)
    shift = math.log1p(tolerance_pct / 100.0) + k * test.se
    return -math.expm1(-shift) if better_up else math.expm1(shift)


def single_run_false_alarm(tolerance_pct: float, sigma: float, tests: int) -> tuple[float, float]:
    """(per figure, over `tests` independent figures) chance that the plain threshold calls pure noise
    of run CV `sigma` a regression: P(ln ratio < -ln(1+tol)), the ratio of two single runs having
    log-sd sigma x sqrt 2."""
    per = statistics.NormalDist().cdf(-math.log1p(tolerance_pct / 100.0) / (sigma * math.sqrt(2.0)))
    return per, 1.0 - (1.0 - per) ** max(tests, 0)


def single_run_statement(tolerance_pct: float, tests: int) -> str:
    rates = "; ".join(f"at {s * 100:g} % run noise {p * 100:.1f} % per figure, {f * 100:.0f} % over {tests}"
                      for s in SINGLE_RUN_NOISES for p, f in [single_run_false_alarm(tolerance_pct, s, tests)])
    return (f"plain threshold on single runs (no noise estimate, no family-wise control): chance to call "
            f"pure noise a regression {rates}")


# ------------------------------------------------------------------ the verdicts of one comparison
REGRESSION, IMPROVEMENT, WITHIN, NO_DIFF = ("regression", "improvement", "within tolerance",
                                            "no measurable difference")


def plain_threshold(r: float, noise: NoiseBand, better_up: bool = True) -> tuple[str, str]:
    """(verdict, detail) of a single run's ratio judged against the band (no noise estimate)."""
    lo_band, hi_band = noise.band
    tol = f"±{noise.tolerance_pct:g} % band [{lo_band:.4f}, {hi_band:.4f}]"
    worse, better = (r < lo_band, r > hi_band) if better_up else (r > hi_band, r < lo_band)
    if worse:
        return REGRESSION, f"single run: plain threshold, worse beyond the {tol}"
    if better:
        return IMPROVEMENT, f"single run: plain threshold, better beyond the {tol}"
    return NO_DIFF, f"single run: plain threshold, inside the {tol}"


@dataclass
class Judged:
    """What the family's correction (settle: Holm over every figure of the comparison) fills in for one
    judged figure; a figure without a test (one run on a side) is UNDECIDABLE."""
    verdict: str = ""
    detail: str = ""
    p_worse: float | None = None          # one-sided p of "no worse than the band", this figure alone
    p_adjusted: float | None = None       # Holm-adjusted over the comparison's family
    detectable_pct: float | None = None   # the change (worse side, %) found with 80 % power at its noise


@dataclass
class Figure:
    """One figure of the family, as settle reads it: its tests, and where its verdict goes."""
    judged: Judged
    test: OneSided | None        # None: no noise estimate (or no log value: goodput 0)
    point: float | None          # the ratio, for the plain threshold of single runs (None: not testable)
    better_up: bool
    excludes_one: int            # the 95 % interval: -1 wholly worse than no change, +1 better, 0 neither


def settle(figures: list[Figure], noise: NoiseBand, single_run_threshold: bool) -> int:
    """Verdicts for a comparison's family: Holm over every tested figure's one-sided p (regressions, and
    separately improvements) at FAMILY_ALPHA; the untested by the plain threshold when accepted, else
    UNDECIDABLE. Returns the family's size."""
    tested = [f for f in figures if f.test is not None]
    m = len(tested)
    worse, better = holm([f.test.p_worse for f in tested]), holm([f.test.p_better for f in tested])
    tol = noise.tolerance_pct
    for f, aw, ab in zip(tested, worse, better):
        j = f.judged
        j.p_worse, j.p_adjusted = f.test.p_worse, aw
        if not math.isnan(f.test.se):   # (SLO attainment's score test has no standard error)
            j.detectable_pct = 100.0 * detectable_change(f.test, tol, m, f.better_up)
        holm_words = f"Holm over {m} figure(s), family-wise alpha {FAMILY_ALPHA:g}"
        if aw <= FAMILY_ALPHA:
            j.verdict, j.detail = REGRESSION, (f"worse beyond the ±{tol:g} % band: p={f.test.p_worse:.2g}, "
                                               f"adjusted p={aw:.2g} ({holm_words})")
        elif ab <= FAMILY_ALPHA:
            j.verdict, j.detail = IMPROVEMENT, (f"better beyond the ±{tol:g} % band: adjusted p={ab:.2g} "
                                                f"({holm_words})")
        elif f.excludes_one:
            word = "better" if f.excludes_one > 0 else "worse"
            j.verdict, j.detail = WITHIN, (f"measurably {word} (interval excludes no change) but not beyond the "
                                           f"±{tol:g} % band (adjusted p={min(aw, ab):.2g}, {holm_words})")
        else:
            j.verdict, j.detail = NO_DIFF, f"interval contains no change (adjusted p={min(aw, ab):.2g})"
    for f in figures:
        if f.test is not None or f.point is None:
            continue
        if single_run_threshold:
            f.judged.verdict, f.judged.detail = plain_threshold(f.point, noise, f.better_up)
        else:
            f.judged.verdict, f.judged.detail = UNDECIDABLE, (
                "one run on a side: no noise estimate, no test (--single-run-threshold judges the ratio "
                "against the band, at the false-alarm rate the output states)")
    return m
