"""The comparison's decision rules, one place for `fab compare`'s per-cell metric (comparison.py) and its
goodput and SLO attainment (compare_slo.py); docs/compare.md, "The verdict"."""
from __future__ import annotations

import statistics

from ..worker.stats import ratio_interval
from .measures import NoiseBand

REGRESSION, IMPROVEMENT, WITHIN, NO_DIFF = ("regression", "improvement", "within tolerance",
                                            "no measurable difference")
LOWER_IS_BETTER = {"mean_tpot_ms", "mean_itl_ms", "mean_ttft_ms", "tpot_weighted_ms"}


def decide(metric: str, a: list[float], b: list[float], noise: NoiseBand) -> tuple[float, float | None,
                                                                                  float | None, str, str, str]:
    """(ratio b/a, interval low, high, method, verdict, detail) by the rule of docs/compare.md."""
    ri = ratio_interval(a, b, noise.confidence)
    if ri is None:
        r, lo, hi = statistics.fmean(b) / statistics.fmean(a), None, None
        method = f"single run: plain threshold, no interval (n={len(a)}/{len(b)})"
    else:
        r, lo, hi = ri.ratio, ri.low, ri.high
        method = f"{noise.confidence:.0%} CI, Welch's t on log values, n={len(a)}/{len(b)}"
    return (r, lo, hi, method, *ratio_verdict(r, lo, hi, noise, better_up=metric not in LOWER_IS_BETTER))


def ratio_verdict(r: float, lo: float | None, hi: float | None, noise: NoiseBand, better_up: bool = True) -> tuple[str, str]:
    """(verdict, detail) of a ratio and its interval (None: a single run, the ratio itself judged)."""
    lo_band, hi_band = noise.band
    tol = f"±{noise.tolerance_pct:g} % band [{lo_band:.4f}, {hi_band:.4f}]"
    if lo is None or hi is None:
        worse, better = (r < lo_band, r > hi_band) if better_up else (r > hi_band, r < lo_band)
        measurable = worse or better
    else:
        worse, better = (hi < lo_band, lo > hi_band) if better_up else (lo > hi_band, hi < lo_band)
        measurable = hi < 1.0 or lo > 1.0
    if worse:
        return REGRESSION, f"worse beyond the {tol}"
    if better:
        return IMPROVEMENT, f"better beyond the {tol}"
    if measurable:
        word = "better" if ((lo or r) > 1.0) == better_up else "worse"
        return WITHIN, f"measurably {word} (interval excludes 1.00) but inside the {tol}"
    return NO_DIFF, "interval contains 1.00" if lo is not None else f"inside the {tol}"


def difference_verdict(lo: float, hi: float, noise: NoiseBand) -> str:
    """The same rule on a difference of proportions (higher is better): its interval [lo, hi] against
    the band of ±tolerance_pct percentage points, and against 0."""
    tol = noise.tolerance_pct / 100.0
    return REGRESSION if hi < -tol else IMPROVEMENT if lo > tol else WITHIN if hi < 0 or lo > 0 else NO_DIFF
