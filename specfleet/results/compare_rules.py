"""The comparison's decision rules, one place for `fab compare`'s per-cell metric (compare.py) and its
goodput and SLO attainment (compare_slo.py): see compare.py's docstring and docs/compare.md."""
from __future__ import annotations

import statistics

from ..worker.stats import ratio_interval
from .measures import NoiseBand

REGRESSION, IMPROVEMENT, WITHIN, NO_DIFF = ("regression", "improvement", "within tolerance",
                                            "no measurable difference")
LOWER_IS_BETTER = {"mean_tpot_ms", "mean_itl_ms", "mean_ttft_ms", "tpot_weighted_ms"}


def decide(metric: str, a: list[float], b: list[float], noise: NoiseBand) -> tuple[float, float | None,
                                                                                  float | None, str, str, str]:
    """(ratio b/a, interval low, high, method, verdict, detail) by the rule in the module docstring."""
    lo_band, hi_band = noise.band
    better_up = metric not in LOWER_IS_BETTER
    ri = ratio_interval(a, b, noise.confidence)
    tol = f"±{noise.tolerance_pct:g} % band [{lo_band:.4f}, {hi_band:.4f}]"
    if ri is None:
        r = statistics.fmean(b) / statistics.fmean(a)
        lo = hi = None
        method = f"single run: plain threshold, no interval (n={len(a)}/{len(b)})"
        worse, better = (r < lo_band, r > hi_band) if better_up else (r > hi_band, r < lo_band)
        measurable = worse or better
    else:
        r, lo, hi = ri.ratio, ri.low, ri.high
        method = f"{noise.confidence:.0%} CI, Welch's t on log values, n={len(a)}/{len(b)}"
        worse, better = (hi < lo_band, lo > hi_band) if better_up else (lo > hi_band, hi < lo_band)
        measurable = hi < 1.0 or lo > 1.0
    if worse:
        return r, lo, hi, method, REGRESSION, f"worse beyond the {tol}"
    if better:
        return r, lo, hi, method, IMPROVEMENT, f"better beyond the {tol}"
    if measurable:
        up = (lo or r) > 1.0
        word = ("better" if up == better_up else "worse")
        return r, lo, hi, method, WITHIN, f"measurably {word} (interval excludes 1.00) but inside the {tol}"
    return r, lo, hi, method, NO_DIFF, "interval contains 1.00" if ri else f"inside the {tol}"


def difference_verdict(lo: float, hi: float, noise: NoiseBand) -> str:
    """The same rule on a difference of proportions (higher is better): its interval [lo, hi] against
    the band of ±tolerance_pct percentage points, and against 0."""
    tol = noise.tolerance_pct / 100.0
    return REGRESSION if hi < -tol else IMPROVEMENT if lo > tol else WITHIN if hi < 0 or lo > 0 else NO_DIFF
