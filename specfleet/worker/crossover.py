"""The crossover search: where does a configuration stop paying? Stdlib only; part of the worker program.

A plan says `concurrencies: {search: crossover, min: 1, max: 256, budget: 12}`. The concurrencies
lie on a geometric grid: the fine grid has `per_doubling` points per doubling (rounded to integers,
duplicates dropped), the coarse grid is every `coarse_factor`-fold step of it (plus `max`). Round 1
measures the coarse grid. After each round, for every configuration, `next_points` looks at its
measured points in order of concurrency and, between two neighbours more than one fine step apart
whose verdicts differ (faster: interval above 1.00x; no measurable difference; slower: interval
below), measures the fine-grid point halfway between them (in grid steps). Two neighbours that
both show no measurable difference are refined only where their estimates straddle 1.00x AND a
measured point beyond them is measurably on that side (faster before a fall through 1.00x, or
slower after it): the curve goes through 1.00x there; elsewhere it is noise (a flat curve would
otherwise spend the whole budget). Pairs whose estimates
straddle 1.00x (the crossover itself) come first, then wider gaps, so a small budget is spent on
the crossover before the interval edges.

It stops when every verdict change lies between neighbouring fine-grid points ("located within one
grid step") or when `budget` concurrencies of that configuration are measured.

The speedup at a concurrency is the configuration's metric over the SAME NODE's baseline, with the
interval of the report (specfleet/worker/stats.py `ratio_interval`: Welch's t on log values of the
repeats; part of the worker program too). With a single run on either side:
the plain tolerance band, as the report's noise band does (measures.NoiseBand).

`crossover_round` is the runner's hook: where the queue runs dry it reads the node's result files
and returns the next round's queue items (one server start per configuration, the baseline at the
union of the new points), or [] when the search is done.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import statistics

from .layout import result_filename
from .runspec import BenchRun

FASTER, NO_DIFF, SLOWER = "faster", "no measurable difference", "slower"


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


def prompts_at(num_prompts: int, min_per_concurrency: float, conc: int, scale: bool) -> int:
    """Prompts of a run at `conc`: the plan's, raised to a steady state (min_per_concurrency x conc)
    when the search scales them (steady_state: required)."""
    return max(num_prompts, math.ceil(min_per_concurrency * conc)) if scale else num_prompts


def judge(cfg: list[float], base: list[float], confidence: float, tolerance_pct: float) -> dict | None:
    """The speedup mean(cfg)/mean(base) with its interval and verdict; None without data."""
    if not cfg or not base or min(cfg + base) <= 0:
        return None
    from .stats import ratio_interval
    ri = ratio_interval(base, cfg, confidence)
    hi_band = 1.0 + tolerance_pct / 100.0
    if ri is None:  # a single run on a side: the plain tolerance band, no interval
        r = statistics.fmean(cfg) / statistics.fmean(base)
        verdict = FASTER if r > hi_band else SLOWER if r < 1.0 / hi_band else NO_DIFF
        return {"speedup": r, "low": None, "high": None, "verdict": verdict, "n": [len(cfg), len(base)]}
    verdict = FASTER if ri.low > 1.0 else SLOWER if ri.high < 1.0 else NO_DIFF
    return {"speedup": ri.ratio, "low": ri.low, "high": ri.high, "verdict": verdict,
            "n": [len(cfg), len(base)]}


def next_points(grid: list[int], coarse: list[int], points: dict[int, dict], budget: int,
                tried: set[int] = frozenset()) -> tuple[list[int], str]:
    """(concurrencies to measure next, why) for one configuration; ([], why) means done.

    `points`: concurrency -> judge() of the measured ones; `tried`: concurrencies already given to
    the runner in this process (not proposed again: a cell that failed must not loop the search).
    """
    left = budget - len(points)
    if left <= 0:
        return [], f"budget spent ({len(points)} of {budget} concurrencies measured)"
    missing = [c for c in coarse if c not in points and c not in tried]
    if missing:
        return missing[:left], "coarse grid"
    idx = {c: i for i, c in enumerate(grid)}
    have = sorted(c for c in points if c in idx)
    cand, failed = [], []
    verdicts = [points[c]["verdict"] for c in have]
    for k, (a, b) in enumerate(zip(have, have[1:])):
        pa, pb = points[a], points[b]
        gap = idx[b] - idx[a]
        if gap < 2:
            continue
        crosses = (pa["speedup"] > 1.0) != (pb["speedup"] > 1.0)
        down = pa["speedup"] > 1.0  # the estimate falls through 1.00x here (else rises)
        before, after = verdicts[:k + 1], verdicts[k + 1:]
        through = (FASTER if down else SLOWER) in before or (SLOWER if down else FASTER) in after
        if pa["verdict"] != pb["verdict"] or crosses and through:
            mid = grid[(idx[a] + idx[b]) // 2]
            if mid not in tried:
                cand.append((not crosses, -gap, mid))
            else:
                failed.append(mid)
    if not cand and failed:
        return [], (f"stopped: concurrency {', '.join(map(str, sorted(set(failed))))} failed in this run "
                    "(not retried until the next fab bench)")
    if not cand:
        return [], "done: every change located within one grid step"
    return sorted(c for *_, c in sorted(cand)[:left]), "refining"


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
    return [(a, b) for a, b in zip(have, have[1:])
            if (points[a]["speedup"] > 1.0) != (points[b]["speedup"] > 1.0)]


# ---------------------------------------------------------------- the runner's side
def _runs(x: dict, config: str, conc: int, num_prompts: int) -> list[dict]:
    """The bench runs (runspec.BenchRun as JSON) of `config` at `conc`, one per repeat."""
    return [BenchRun(concurrency=conc, rep=rep, num_prompts=num_prompts, output_len=x["output_len"],
                     result_file=result_filename(config, conc, rep, x["repeat"])).to_json()
            for rep in range(1, x["repeat"] + 1)]


def _values(result_dir: str, x: dict, config: str, conc: int) -> list[float] | None:
    """The metric over the repeats of one cell, or None unless every repeat's file is a result."""
    vals = []
    for run in _runs(x, config, conc, 0):
        path = os.path.join(result_dir, run["result_file"])
        try:
            with open(path) as f:
                v = json.load(f).get(x["metric"])
        except (OSError, ValueError, AttributeError):
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            return None
        vals.append(float(v))
    return vals


def measured(x: dict, result_dir: str, config: str) -> dict[int, list[float]]:
    """concurrency -> values over repeats, for the cells of `config` whose files are all there."""
    out = {}
    for c in fine_grid(x["min"], x["max"], x["per_doubling"]):
        vals = _values(result_dir, x, config, c)
        if vals is not None:
            out[c] = vals
    return out


def decide(x: dict, result_dir: str, tried: dict[str, set[int]]) -> dict[str, dict]:
    """Per configuration: its judged points, the next concurrencies and why."""
    grid = fine_grid(x["min"], x["max"], x["per_doubling"])
    coarse = coarse_grid(x["min"], x["max"], x["coarse_factor"])
    base = measured(x, result_dir, x["baseline"])
    out = {}
    for cfg in x["configs"]:
        mine = measured(x, result_dir, cfg)
        points = {c: j for c, v in mine.items() if c in base
                  and (j := judge(v, base[c], x["confidence"], x["tolerance_pct"])) is not None}
        todo, why = next_points(grid, coarse, points, x["budget"], tried.get(cfg, set()))
        # a cell of the configuration whose baseline is missing needs only the baseline: never redone
        out[cfg] = {"points": {str(c): p for c, p in sorted(points.items())},
                    "next": [c for c in todo if c not in mine], "why": why,
                    "baseline_missing": sorted(c for c in todo if c in mine and c not in base)}
    return out


def _item(base_item: dict, name: str, entries: list[dict]) -> dict:
    # the configuration's server log gets every round's server (appended, a header per start), so the
    # report's KV facts stay per configuration
    item = dict(base_item, name=name, bench=entries, log_name=base_item["name"])
    if item.get("fit"):
        item["fit"] = dict(item["fit"], num_prompts=max(e["num_prompts"] for e in entries))
    item.pop("item_hash", None)
    item["item_hash"] = hashlib.sha256(json.dumps(item, sort_keys=True).encode()).hexdigest()[:12]
    return item


def crossover_round(spec: dict, result_dir: str, tried: dict[str, set[int]], round_no: int) -> tuple[list[dict], dict]:
    """(the next round's queue items, the decision per configuration). `tried` is updated."""
    x = spec.get("crossover")
    if not x:
        return [], {}
    if not tried:  # what the spec's own items measure counts as tried: a failed cell is not retried here
        for it in spec["items"]:
            tried.setdefault(it.get("config", it["name"]), set()).update(b["concurrency"] for b in it["bench"])
    decision = decide(x, result_dir, tried)
    need: dict[str, list[int]] = {cfg: d["next"] for cfg, d in decision.items() if d["next"]}
    base_have = set(measured(x, result_dir, x["baseline"]))
    base_need = sorted(({c for v in need.values() for c in v}
                        | {c for d in decision.values() for c in d["baseline_missing"]})
                       - base_have - tried.get(x["baseline"], set()))
    by_name = {it["name"]: it for it in spec["items"]}
    items = []
    for cfg, concs in [(x["baseline"], base_need), *need.items()]:
        if not concs or cfg not in by_name:
            continue
        by_conc = {c: _runs(x, cfg, c, prompts_at(x["num_prompts"], x["min_prompts_per_concurrency"], c,
                                                  x["scale_prompts"])) for c in concs}
        entries = [by_conc[c][k] for k in range(x["repeat"]) for c in concs]  # repeats interleaved across concurrencies
        items.append(_item(by_name[cfg], f"{cfg}.round{round_no}", entries))
        tried.setdefault(cfg, set()).update(concs)
    return items, decision
