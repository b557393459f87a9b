#!/usr/bin/env python3
"""The error rates of the shipped gate policy (specfleet/report/gates/gate_policy.py), by simulation.

Measurement model: the baseline's gate metric on node A is exp(N(0, sigma)) per run, on node B
(1 + diff) x exp(N(0, sigma)) (lognormal run-to-run noise, independent runs). The policy as it ships:
the plan's default repeats (3 runs per node) first; while the gate says INCONCLUSIVE with runs left
in the budget, runs are added per node up to the next look (gate_policy.LOOKS) and the gate is asked
again. Every decision is `specfleet.report.gates.gate.decide` with the plan's default rule, the function
`check_equivalence` (the report's gate) calls for every node pair; tests/report/test_gate_power.py
checks that a written campaign gives the same decision through the report.

Per (sigma, diff) it prints `gate-power sigma=<s>% diff=<d>% pass=<rate> mean_runs=<n>`: the share of
trials that end PASSED, and the mean runs per node at the end. Targets (issue 23): at sigma 1 % and
2 %, diff 0 passes >= 0.95 and diff 4 % passes <= 0.05; exit 1 when not met.

Then the realistic noise (REALISTIC_NOISE: measured on the lent H200 through the product path,
docs/engines-gpu.md "Run-to-run noise, measured"), one line per cell, repeat model and diff:
`gate-power-realistic <cell> repeats=<model> sigma=<s>% start=<t>% diff=<d>% pass=<rate> merged=<rate>
mean_runs=<n> cost=<s> s/node`, where `start` is the spread of a server start (runs that share a start
share one draw of it: more runs on it do not average it away), `repeats` the plan's repeat_isolation
(server-start: each run its own start; cache-reset: the plan's 3 repeats share one start per node,
runs the gate adds are starts of their own), pass the share PASSED, merged the share PASSED or
UNVERIFIED (one start per node: merged, nothing verified), cost the device seconds on one node.

    .venv/bin/python benchmarks/gate_power.py [--trials 400] [--seed 20261201]    # ~90 s on 2 busy cores
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specfleet.plan import Benchmark  # noqa: E402
from specfleet.report.gates.gate import EquivalenceRule, decide  # noqa: E402
from specfleet.report.gates.gate_policy import INCONCLUSIVE, MERGES, PASSED, next_look  # noqa: E402

SIGMAS = (0.5, 1.0, 2.0, 4.0)
#: Run-to-run noise of the gate's metric (token-weighted TPOT) measured on the lent H200 on 2026-12-02
#: (one GPU, vLLM 0.26.0, dummy Qwen3-8B shape, 16 Spec-Bench prompts, output 128, greedy, 5 repeats
#: per server start, prefix cache reset between runs; docs/engines-gpu.md "Run-to-run noise, measured",
#: printed by testbed/realgpu/noise.py, files in docs/examples/h200-fleet/ at b2ba9e9): (cell, CV on one server
#: start in %, spread across server starts in %, seconds one more run costs there, the ~10 s
#: `vllm bench serve` client start included). An n-gram cell as the baseline is the worst case.
REALISTIC_NOISE = (
    # within a start: the two starts' CVs pooled; across: |ln(A'/A)| / sqrt 2 from ONE pair of starts (crude)
    ("h200-vanilla-c1", 0.09, 0.17, 25.0),
    ("h200-vanilla-c16", 0.75, 0.52, 17.0),   # the gate's default point (concurrency 16)
    ("h200-ngram-c1", 19.73, 0.0, 22.0),      # one start only: across-start spread not measured
    ("h200-ngram-c16", 20.63, 0.0, 15.0),
    # between two machines (issue 41): two lent H100s as nodes w1 and w2 on 2026-12-06, each with two server
    # starts (vanilla, vanilla-b), 80 prompts at c=16 (docs/examples/gpu-nodes/noise.txt): within a start the
    # four starts' CVs pooled (c=1: w1's vanilla-b holds one stalled run, 3.3 %; the other three 0.01-0.02 %);
    # `start` here is the sd of the four starts' log means (machine and start spread together, 3 df; it
    # includes their run-to-run part, so it overstates the start's own spread); ~16.5 s a run there
    ("h100-vanilla-c1-between-machines", 1.63, 0.70, 16.5),
    ("h100-vanilla-c16-between-machines", 0.40, 0.05, 16.5),
)
REALISTIC_DIFFS = (0, 3, 4)
ISOLATIONS = ("server-start", "cache-reset")   # the plan's benchmark.repeat_isolation
DIFFS = (0, 1, 2, 3, 4, 5)
START_RUNS = Benchmark.model_fields["repeat"].default   # the plan's default repeats


def one_trial(rule: EquivalenceRule, sigma: float, diff: float, rng: random.Random,
              start_sigma: float = 0.0, isolation: str = "server-start") -> tuple[bool, int, str]:
    """One campaign's gate: (PASSED?, runs per node at the end, the final state). The repeat model:
    `server-start`, every run a server start of its own (a fresh draw of the start's shift);
    `cache-reset`, the plan's START_RUNS repeats share one start per node and every run the gate adds
    (fab bench --gate-runs) is a start of its own, as the runner does. Each run's start goes to
    gate.decide, which counts runs sharing a start as one sample."""
    a: list[float] = []
    b: list[float] = []
    sa: list[str] = []
    sb: list[str] = []
    n = START_RUNS
    # drawn only when asked, so the synthetic grid's random stream (docs/report.md's table) stays as it was
    shared = (rng.gauss(0.0, start_sigma), rng.gauss(0.0, start_sigma)) if start_sigma else (0.0, 0.0)
    while True:
        while len(a) < n:
            own = isolation == "server-start" or len(a) >= START_RUNS
            k = f"r{len(a)}" if own else "shared"
            sh_a, sh_b = ((rng.gauss(0.0, start_sigma), rng.gauss(0.0, start_sigma)) if own and start_sigma
                          else (0.0, 0.0) if own else shared)
            a.append(100.0 * math.exp(sh_a + rng.gauss(0.0, sigma)))
            b.append(100.0 * (1.0 + diff) * math.exp(sh_b + rng.gauss(0.0, sigma)))
            sa.append(k)
            sb.append(k)
        chk = decide(rule, a, b, sa, sb)
        # the next look counts samples (server starts); --gate-runs adds that many runs, each its own start
        nxt = next_look(chk.n_a)
        if chk.state != INCONCLUSIVE or nxt is None:
            return chk.state == PASSED, n, chk.state
        n += nxt - chk.n_a


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--seed", type=int, default=20261201)
    args = ap.parse_args(argv)
    rule = EquivalenceRule()
    t0 = time.monotonic()
    print(f"# policy: {rule.describe()}")
    print(f"# trials {args.trials} per line, seed {args.seed}, start {START_RUNS} runs per node")
    ok = True
    for s in SIGMAS:
        for d in DIFFS:
            rng = random.Random(f"{args.seed}-{s}-{d}")
            res = [one_trial(rule, s / 100, d / 100, rng) for _ in range(args.trials)]
            rate = sum(p for p, _, _ in res) / len(res)
            runs = sum(n for _, n, _ in res) / len(res)
            print(f"gate-power sigma={s:g}% diff={d:g}% pass={rate:.3f} mean_runs={runs:.1f}", flush=True)
            if s in (1.0, 2.0) and ((d == 0 and rate < 0.95) or (d == 4 and rate > 0.05)):
                ok = False
    for cell, sigma, start, run_s in REALISTIC_NOISE:
        for iso in ISOLATIONS:
            for d in REALISTIC_DIFFS:
                rng = random.Random(f"{args.seed}-{cell}-{iso}-{d}")
                res = [one_trial(rule, sigma / 100, d / 100, rng, start / 100, iso) for _ in range(args.trials)]
                rate = sum(p for p, _, _ in res) / len(res)
                merged = sum(st in MERGES for _, _, st in res) / len(res)
                runs = sum(n for _, n, _ in res) / len(res)
                print(f"gate-power-realistic {cell} repeats={iso} sigma={sigma:g}% start={start:g}% diff={d:g}% "
                      f"pass={rate:.3f} merged={merged:.3f} mean_runs={runs:.1f} cost={runs * run_s:.0f} s/node",
                      flush=True)
                if d >= 4 and rate > 0.05:   # beyond the margin: passes <= alpha whatever the repeat model
                    ok = False
    print(f"# {time.monotonic() - t0:.1f} s; targets (sigma 1-2 %: diff 0 >= 0.95, diff 4 % <= 0.05; realistic: "
          f"diff 4 % <= 0.05 for either repeat model) {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
