"""The crossover search's concurrency grids, read from the plan's `concurrencies: {search: crossover,
...}`, and the search run without a runner (benchmarks/crossover_search.py, tests/worker/test_crossover.py).

The bastion puts the grids and each grid point's prompts into the run spec (campaign/spec.py
`crossover_spec`); the runner's rounds (specfleet/worker/crossover.py) only read them.
"""
from __future__ import annotations

from ..worker.crossover import judge, next_points, straddles


def fine_grid(lo: int, hi: int, per_doubling: int) -> list[int]:
    """lo x 2^(i/per_doubling) rounded, up to hi (included), duplicates dropped."""
    out, i = [], 0
    while True:
        v = round(lo * 2 ** (i / per_doubling))
        if v >= hi:
            break
        if not out or v > out[-1]:
            out.append(v)
        i += 1
    return out + [hi]


def coarse_grid(lo: int, hi: int, coarse_factor: int) -> list[int]:
    """lo x coarse_factor^k up to hi, and hi. Every value is on the fine grid when coarse_factor is a
    power of two (checked by the plan)."""
    out, v = [], lo
    while v < hi:
        out.append(v)
        v *= coarse_factor
    return out + [hi]


def search(measure, lo: int, hi: int, budget: int, coarse_factor: int, per_doubling: int, *,
           confidence: float, tolerance_pct: float) -> tuple[dict[int, dict], list[list[int]], str]:
    """The search without a runner: `measure(conc)` -> (configuration values, baseline values).
    Returns (judged points, the concurrencies of each round, why it stopped). The plan's defaults:
    `ConcurrencySearch`, `Equivalence.tolerance_pct`; the report's confidence: stats.SPEEDUP_CONFIDENCE."""
    grid, coarse = fine_grid(lo, hi, per_doubling), coarse_grid(lo, hi, coarse_factor)
    points: dict[int, dict] = {}
    rounds: list[list[int]] = []
    tried: set[int] = set()
    while True:
        todo, why = next_points(grid, coarse, points, budget, tried)
        if not todo:
            return points, rounds, why
        rounds.append(todo)
        tried.update(todo)
        for c in todo:
            if (j := judge(*measure(c), confidence, tolerance_pct)) is not None:
                points[c] = j


def crossings(points: dict[int, dict]) -> list[tuple[int, int]]:
    """Neighbouring measured concurrencies (a, b) between which the speedup estimate crosses 1.00x."""
    have = sorted(points)
    return [(a, b) for a, b in zip(have, have[1:]) if straddles(points[a], points[b])]
