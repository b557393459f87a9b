#!/usr/bin/env python3
"""Does the crossover search find where speculation stops paying, with fewer cells than a grid?

Truth: the simulated engine's model, `speedup(method, k, concurrency, category, output_len)` of
testbed/simvllm/vllm/model.py (TPOT(vanilla) / TPOT(method), SIMULATED), and its `crossover()`.
Where that file is absent (before the simulated engine's model landed) a stated synthetic curve
stands in: speedup = s1 x (1 + c / c0)^-0.6, crossing 1.0 at c0 (s1^(1/0.6) - 1).

Measurement model: every run's output tok/s = truth x exp(N(0, sigma)), sigma = 2 % per run
(the field report §5.1 saw 1.8 % between two nodes' baselines at c=16), `--reps` runs per cell of
the configuration and of the baseline. The search (specfleet/worker/crossover.py, the runner's
code, run by specfleet/plan/crossover_grid.py `search`) runs on concurrencies 1-256: coarse grid x4 (1 4 16 64 256), fine grid 4 points per
doubling, budget = half the full fine grid. Per case over `--seeds` seeds it prints: cells used
(max, mean), how often the estimate's one crossing lies between two neighbouring fine-grid points,
how often the true crossover lies inside that step, how often inside it or a neighbouring step
("<=1 step": located within one grid step), and the worst distance in grid steps (a seed whose
noise shows more than one crossing counts as the whole grid). Target: <=1 step in >= 95 % of the
seeds of every case, never more cells than the budget; exit 1 when not met.

`--plan P` searches as plan P's `benchmark.concurrencies: {search: crossover, ...}` says (its min,
max, coarse_factor, per_doubling, budget; its benchmark.repeat unless --reps is given) instead.

    .venv/bin/python benchmarks/crossover_search.py [--seeds 200] [--reps 3] [--sigma 0.02] [--plan P]
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specfleet.plan.crossover_grid import coarse_grid, crossings, fine_grid, search  # noqa: E402
from specfleet.plan import Equivalence, load_plan  # noqa: E402
from specfleet.report.tables.measures import SPEEDUP_CONFIDENCE  # noqa: E402

SIM_MODEL = ROOT / "testbed" / "simvllm" / "vllm" / "model.py"
LO, HI, COARSE, PER_DOUBLING = 1, 256, 4, 4   # the default search (budget: half its fine grid)


def sim_model(path: Path):
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("simvllm_model", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["simvllm_model"] = mod  # dataclasses look the module up by name
    spec.loader.exec_module(mod)
    return mod


def cases(model, lo: int = LO, hi: int = HI):
    """(name, speedup(c), true crossover or None)."""
    if model is None:
        out = []
        for name, s1, c0 in (("synthetic 2.1x, c0 40", 2.1, 40), ("synthetic 1.2x, c0 8", 1.2, 8),
                             ("synthetic 3.0x, c0 4", 3.0, 4)):
            out.append((name, lambda c, s1=s1, c0=c0: s1 * (1 + c / c0) ** -0.6, c0 * (s1 ** (1 / 0.6) - 1)))
        return out
    out = []
    for name, kw in (("eagle3 k=3", dict(method_name="eagle3", k=3)),
                     ("eagle3 k=5", dict(method_name="eagle3", k=5)),
                     ("ngram k=4 2-128", dict(method_name="ngram", k=4)),
                     ("ngram k=4 summarization", dict(method_name="ngram", k=4, category="summarization")),
                     ("eagle3 k=3 out 2048", dict(method_name="eagle3", k=3, output_len=2048)),
                     # the field report's flat n-gram curve (1.07x at c=1, 0.95x at 16): reported, not
                     # in the target (a flat curve crosses 1.0 where the noise decides)
                     (FLAT, dict(method_name="ngram", k=6, prompt_lookup_min=4, prompt_lookup_max=6))):
        f = lambda c, kw=kw: model.speedup(concurrency=c, **kw)  # noqa: E731
        out.append((name, f, model.crossover(lo=lo, hi=hi, **kw)))
    return out


FLAT = "ngram k=6 4-6 (report, flat)"


def run_case(truth, cross, seeds: int, reps: int, sigma: float, budget: int,
             lo: int = LO, hi: int = HI, coarse: int = COARSE, per_doubling: int = PER_DOUBLING) -> dict:
    grid = fine_grid(lo, hi, per_doubling)
    cells, located, inside, near, worst, none_ok = [], 0, 0, 0, 0, 0
    for seed in range(seeds):
        rng = random.Random(seed)

        def measure(c):
            noise = lambda: math.exp(rng.gauss(0, sigma))  # noqa: E731
            return [100 * truth(c) * noise() for _ in range(reps)], [100 * noise() for _ in range(reps)]
        pts, _, _ = search(measure, lo, hi, budget, coarse, per_doubling, confidence=SPEEDUP_CONFIDENCE,
                           tolerance_pct=Equivalence().tolerance_pct)
        cells.append(len(pts))
        xs = crossings(pts)
        if cross is None:
            none_ok += not xs
            continue
        if len(xs) != 1:
            worst = max(worst, len(grid))
            continue
        a, b = xs[0]
        ia, ib = grid.index(a), grid.index(b)
        located += ib - ia == 1
        inside += a <= cross <= b
        near += grid[max(ia - 1, 0)] <= cross <= grid[min(ib + 1, len(grid) - 1)]
        # distance in grid steps from the found step to the true crossover (0 = inside)
        ic = sum(1 for g in grid if g <= cross) - 1  # the true crossover lies in step [ic, ic + 1]
        worst = max(worst, max(ia - ic, ic - ia, 0))
    return {"cells_max": max(cells), "cells_mean": sum(cells) / len(cells), "located": located,
            "inside": inside, "near": near, "worst_steps": worst, "none_ok": none_ok}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--reps", type=int, default=None, help="runs per cell (default 3, or the plan's repeat)")
    ap.add_argument("--sigma", type=float, default=0.02)
    ap.add_argument("--model-file", type=Path, default=SIM_MODEL, help="the simulated engine's model.py")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this")
    ap.add_argument("--plan", type=Path, default=None, help="search as this plan's concurrency search says")
    a = ap.parse_args()
    model = sim_model(a.model_file)
    lo, hi, coarse, per_doubling = LO, HI, COARSE, PER_DOUBLING
    grid = fine_grid(lo, hi, per_doubling)
    budget, reps, what = len(grid) // 2, a.reps or 3, "half the full grid"
    if a.plan is not None:
        plan = load_plan(a.plan)
        x = plan.benchmark.concurrency_search
        if x is None:
            ap.error(f"{a.plan}: no concurrency search (benchmark.concurrencies: {{search: crossover, ...}})")
        lo, hi, coarse, per_doubling, budget = x.min, x.max, x.coarse_factor, x.per_doubling, x.budget
        grid, reps, what = fine_grid(lo, hi, per_doubling), a.reps or plan.benchmark.repeat, f"the plan {a.plan}"
    a.reps = reps
    src = f"the simulated engine's model ({a.model_file}), SIMULATED" if model else \
        "a synthetic curve s1 x (1 + c/c0)^-0.6 (testbed/simvllm/vllm/model.py is absent)"
    print(f"truth: {src}")
    print(f"concurrency {lo}-{hi}; full grid at this resolution ({per_doubling} per doubling): {len(grid)} cells "
          f"{grid}")
    print(f"search: coarse {coarse_grid(lo, hi, coarse)}, budget {budget} ({what}); "
          f"{a.reps} runs per cell, sigma {a.sigma:.0%} per run, {a.seeds} seeds\n")
    head = (f"{'case':26} {'true crossover':>14} {'cells max':>9} {'mean':>5} {'one step':>9} "
            f"{'inside':>7} {'<=1 step':>9} {'worst':>5}")
    print(head)
    print("-" * len(head))
    ok = True
    for name, truth, cross in cases(model, lo, hi):
        if a.only and a.only not in name:
            continue
        r = run_case(truth, cross, a.seeds, a.reps, a.sigma, budget, lo, hi, coarse, per_doubling)
        ok &= r["cells_max"] <= budget
        if cross is None:
            print(f"{name:26} {'none in range':>14} {r['cells_max']:>9} {r['cells_mean']:>5.1f} "
                  f"{'no crossing found: ' + str(r['none_ok']) + '/' + str(a.seeds):>33}")
            continue
        pct = lambda n: f"{100 * n / a.seeds:.1f} %"  # noqa: E731
        print(f"{name:26} {cross:>14.1f} {r['cells_max']:>9} {r['cells_mean']:>5.1f} {pct(r['located']):>9} "
              f"{pct(r['inside']):>7} {pct(r['near']):>9} {r['worst_steps']:>5}")
        ok &= r["near"] >= 0.95 * a.seeds or name == FLAT
    print("\none step: the estimate's crossing found between two neighbouring fine-grid points; inside: the "
          "true crossover\nlies in that step; <=1 step: in it or in a neighbouring step; worst: the largest "
          "distance in steps.")
    print(f"\ntarget: the crossover within one grid step (<=1 step) in >= 95 % of the seeds of every case but "
          f"the report's flat n-gram curve (reported only), "
          f"with at most {budget} of the {len(grid)} cells ({what}): {'met' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
