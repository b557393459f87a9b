#!/usr/bin/env python3
"""The error rates and power of `fab compare --fail-on regression` as it ships, by simulation.

Measurement model: a comparison judges FIGURES figures (the demo plan: 8 cells x 3 metrics, what
users feel); each figure's value per run is exp(N(0, sigma)) on the baseline and (1 - slow) x
exp(N(0, sigma)) on the candidate (lognormal run-to-run noise, independent runs, n runs a side).
Every verdict is the shipped one: `specfleet.report.compare.comparison.cell_diff` (the ratio, its interval
and one-sided test) for each figure, then `compare_policy.settle` (Holm over the family at
FAMILY_ALPHA) over all of them, as `compare_dirs` does; tests/report/test_compare.py
checks a small run of it.

Per (sigma, n) two kinds of trial: every figure unchanged (the false alarm: any figure called a
regression, the family-wise rate), and one figure slowed by each of SLOWS with the rest unchanged (the
power: how often each slowed figure is called a regression, in that family). It prints
`compare-power sigma=<s>% n=<n> figures=<m> false_alarm=<rate> found@5%=<rate> found@15%=<rate>
found@30%=<rate> stated_detectable=<p>%`, stated_detectable the mean "detectable worsening" the
output printed (the drop it claims to find 80 % of the time). Then single runs:
`compare-power-single sigma=<s>% figures=<m> undecidable=<rate> default_false_alarm=<rate>
plain_false_alarm=<rate> stated=<rate>`: the default (undecidable, never a regression) and the plain
threshold a user may accept with --single-run-threshold, against the family rate
compare_policy.single_run_false_alarm states. Target: false_alarm <= FAMILY_ALPHA (with 3 binomial
standard errors of slack) at every noise; exit 1 when not met.

    .venv/bin/python benchmarks/compare_power.py [--trials 200] [--seed 20261206]    # ~10 min on one core
"""
from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specfleet.report.tables.compare_policy import (FAMILY_ALPHA, REGRESSION, UNDECIDABLE, settle,  # noqa: E402
                                              single_run_false_alarm)
from specfleet.report.compare.comparison import cell_diff  # noqa: E402
from specfleet.report.tables.measures import NoiseBand  # noqa: E402

FIGURES = 24                      # the demo plan: 8 cells x (output tok/s, TTFT, token-weighted TPOT)
TOLERANCE_PCT = 3.0               # the plan's default equivalence.tolerance_pct
SIGMAS = (0.01, 0.02, 0.05, 0.20)   # 20 %: an n-gram cell on a real GPU (gate_power.REALISTIC_NOISE)
RUNS = (3, 5)
SLOWS = (0.05, 0.15, 0.30)


def one_trial(sigma: float, n: int, slows: tuple[float, ...], rng: random.Random, figures: int = FIGURES,
              single_run_threshold: bool = False) -> tuple[bool, list[bool], list[float | None], bool]:
    """(an unchanged figure called a regression, each slowed figure called one, their stated
    detectable worsening in %, any figure undecidable) for one simulated comparison whose first
    len(slows) figures are slowed by `slows`."""
    noise = NoiseBand(TOLERANCE_PCT)
    diffs, figs = [], []
    for i in range(figures):
        factor = 1.0 - (slows[i] if i < len(slows) else 0.0)
        a = [100.0 * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]
        b = [100.0 * factor * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]
        d, f = cell_diff(("c", f"conc{i}"), 1, "output_throughput", a, b, noise)
        diffs.append(d)
        figs.append(f)
    settle(figs, noise, single_run_threshold)
    slowed = diffs[:len(slows)]
    return (any(d.verdict == REGRESSION for d in diffs[len(slows):]), [d.verdict == REGRESSION for d in slowed],
            [d.judged.detectable_pct for d in slowed], any(d.verdict == UNDECIDABLE for d in diffs))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=20261206)
    args = ap.parse_args(argv)
    bound = FAMILY_ALPHA + 3 * math.sqrt(FAMILY_ALPHA * (1 - FAMILY_ALPHA) / args.trials)
    ok = True
    for sigma in SIGMAS:
        for n in RUNS:
            rng = random.Random(f"{args.seed}-{sigma}-{n}")
            null = [one_trial(sigma, n, (), rng) for _ in range(args.trials)]
            slow = [one_trial(sigma, n, SLOWS, rng) for _ in range(args.trials)]
            false = sum(r[0] for r in null) / args.trials
            found = " ".join(f"found@{s * 100:g}%={sum(r[1][i] for r in slow) / args.trials:.3f}"
                             for i, s in enumerate(SLOWS))
            stated = statistics.fmean(x for r in slow for x in r[2] if x is not None)
            print(f"compare-power sigma={sigma * 100:g}% n={n} figures={FIGURES} false_alarm={false:.3f} {found} "
                  f"stated_detectable={stated:.1f}%", flush=True)
            ok &= false <= bound
    for sigma in SIGMAS[:3]:
        rng = random.Random(f"{args.seed}-single-{sigma}")
        und = [one_trial(sigma, 1, (), rng) for _ in range(args.trials)]
        plain = [one_trial(sigma, 1, (), rng, single_run_threshold=True) for _ in range(args.trials)]
        stated = single_run_false_alarm(TOLERANCE_PCT, sigma, FIGURES)[1]
        print(f"compare-power-single sigma={sigma * 100:g}% figures={FIGURES} "
              f"undecidable={sum(r[3] for r in und) / args.trials:.3f} "
              f"default_false_alarm={sum(r[0] for r in und) / args.trials:.3f} "
              f"plain_false_alarm={sum(r[0] for r in plain) / args.trials:.3f} stated={stated:.3f}", flush=True)
        ok &= not any(r[0] for r in und)
    print("compare-power: targets " + ("met" if ok else "NOT met") +
          f" (false alarms <= {FAMILY_ALPHA:g} family-wise at every noise; single runs never a regression "
          "by default)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
