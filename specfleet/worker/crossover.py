"""The crossover search: where does a configuration stop paying? Stdlib only; part of the worker program.
The algorithm, the plan's fields, what state.json records and how a round keeps its repeats apart:
docs/campaign.md §10 and docs/dev/worker.md. The grids and each point's prompts come from the bastion
(run spec `crossover`; specfleet/plan/crossover_grid.py); `crossover_round` is the runner's hook where
the queue runs dry.
"""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import replace

from .layout import result_filename
from .runspec import BenchRun, Crossover, Item
from .stats import geometric_ratio, ratio_interval, wilson_interval

FASTER, NO_DIFF, SLOWER = "faster", "no measurable difference", "slower"
MEETS, MISSES = "meets the SLO", "misses the SLO"
GOODPUT = "goodput"   # the plan's ConcurrencySearch.metric that searches for the highest load meeting the SLO


def speedup_verdict(point: float, ri, band: tuple[float, float]) -> str:
    """The one rule of the search and the report (results/measures.speedup_noise): faster or slower
    only outside the band (the minimum effect of interest, with 1 run or 10) and, where there is an
    interval (ri: stats.ratio_interval, repeats on both sides), only where it also excludes 1.00x."""
    faster, slower = point > band[1], point < band[0]
    if ri is not None:
        faster, slower = faster and ri.low > 1.0, slower and ri.high < 1.0
    return FASTER if faster else SLOWER if slower else NO_DIFF


def judge(cfg: list[float], base: list[float], confidence: float, tolerance_pct: float) -> dict | None:
    """The speedup of cfg over base (the ratio of geometric means, as the report's) with its interval
    and verdict (speedup_verdict, the band [1/(1+tol), 1+tol]); None without data."""
    if not cfg or not base or min(cfg + base) <= 0:
        return None
    ri = ratio_interval(base, cfg, confidence)
    point, hi = geometric_ratio(base, cfg), 1.0 + tolerance_pct / 100.0
    return {"speedup": point, "low": ri and ri.low, "high": ri and ri.high, "n": [len(cfg), len(base)],
            "verdict": speedup_verdict(point, ri, (1.0 / hi, hi))}


def request_latencies(ttfts, latencies, itls) -> list | None:
    """Each request's end-to-end latency in seconds: the file's `latencies` (vLLM >= 0.30), else its
    TTFT plus the sum of its ITLs (0.26-0.29 write no `latencies`; the bench's streaming client times
    both from the same chunks, and vLLM's own timeline plot adds them so). None when neither is there,
    the arrays are uneven or a value is not a number."""
    if isinstance(latencies, (list, tuple)):
        return list(latencies)
    if not isinstance(ttfts, (list, tuple)) or not isinstance(itls, (list, tuple)) or len(ttfts) != len(itls):
        return None
    out = []
    for ttft, gaps in zip(ttfts, itls):
        if not isinstance(ttft, (int, float)) or not isinstance(gaps, (list, tuple)) or \
                not all(isinstance(g, (int, float)) for g in gaps):
            return None
        out.append(ttft + sum(gaps))
    return out


def why_no_goodput(d: dict) -> str | None:
    """Why a result's requests cannot be judged against an SLO (good_requests gives None), in words;
    None when they can."""
    if not all(isinstance(d.get(k), (list, tuple)) for k in ("ttfts", "output_lens")):
        return "the result files have no per-request arrays (ttfts, output_lens: vllm bench serve --save-detailed)"
    if request_latencies(d.get("ttfts"), d.get("latencies"), d.get("itls")) is None:
        return "the result files have neither per-request latencies nor ITLs to add to each TTFT"
    if good_requests(d.get("ttfts"), d.get("latencies"), d.get("output_lens"), d.get("errors"), {},
                     d.get("itls")) is None:
        return "the result files' per-request arrays have different lengths"
    return None


def good_requests(ttfts, latencies, output_lens, errors, limits: dict[str, float],
                  itls=None) -> tuple[int, int] | None:
    """(good, succeeded) requests of one result by vLLM's --goodput rule (benchmarks/serve.py
    `calculate_metrics`): a request that succeeded is good when TTFT <= ttft_ms, TPOT = (latency -
    TTFT) / (output tokens - 1) <= tpot_ms (0 for one token) and latency <= e2el_ms, each limit set.
    Latency: request_latencies (TTFT + ITLs where the file has no `latencies`). None when the
    per-request arrays are missing or uneven (times in seconds, as vLLM saves them)."""
    latencies = request_latencies(ttfts, latencies, itls)
    if not all(isinstance(a, (list, tuple)) for a in (ttfts, latencies, output_lens)) or \
            not len(ttfts) == len(latencies) == len(output_lens):
        return None
    errors = errors if isinstance(errors, (list, tuple)) and len(errors) == len(ttfts) else None
    good = ok = 0
    for i, (ttft, lat, n) in enumerate(zip(ttfts, latencies, output_lens)):
        if (errors is not None and errors[i]) or not n:
            continue  # a failed request is neither good nor counted
        ok += 1
        tpot = (lat - ttft) / (n - 1) if n > 1 else 0.0
        got = {"ttft_ms": ttft * 1000, "tpot_ms": tpot * 1000, "e2el_ms": lat * 1000}
        good += all(got[k] <= v for k, v in limits.items())
    return good, ok


def judge_slo(cfg: list[tuple[int, int, float]], base: list[tuple[int, int, float]] | None, confidence: float,
              attainment_pct: float) -> dict | None:
    """A point of the goodput search: `cfg` / `base` are (good, succeeded, duration) per repeat.
    Verdict MEETS when good / succeeded (pooled) >= attainment_pct; the share's Wilson interval; the
    goodput ratio over the baseline (None without one or when the baseline's is 0), with the log
    interval only when every goodput is > 0."""
    good, ok = sum(g for g, _, _ in cfg), sum(n for _, n, _ in cfg)
    if not ok:
        return None
    low, high = wilson_interval(good, ok, confidence)
    gp = [g / d for g, _, d in cfg]
    out = {"verdict": MEETS if 100.0 * good / ok >= attainment_pct else MISSES,
           "attainment_pct": 100.0 * good / ok, "attainment_low": 100.0 * low, "attainment_high": 100.0 * high,
           "goodput": statistics.fmean(gp), "speedup": None, "low": None, "high": None, "n": [len(cfg)]}
    if base:
        bp = [g / d for g, _, d in base]
        out["n"].append(len(bp))
        if statistics.fmean(bp) > 0:
            out["speedup"] = statistics.fmean(gp) / statistics.fmean(bp)
        if min(gp + bp) > 0 and (ri := ratio_interval(bp, gp, confidence)) is not None:
            out.update(speedup=ri.ratio, low=ri.low, high=ri.high)
    return out


def straddles(pa: dict, pb: dict) -> bool:
    """The speedup estimate is on either side of 1.00x at a and b (never without an estimate)."""
    return pa["speedup"] is not None and pb["speedup"] is not None and (pa["speedup"] > 1.0) != (pb["speedup"] > 1.0)


def highest_meeting(points: dict[int, dict]) -> int | None:
    """The goodput search's answer: the highest measured concurrency that meets the SLO."""
    return max((c for c, p in points.items() if p["verdict"] == MEETS), default=None)


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
        crosses = straddles(pa, pb)
        down = pa["speedup"] is not None and pa["speedup"] > 1.0  # the estimate falls through 1.00x here (else rises)
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


# ---------------------------------------------------------------- the runner's side
def _runs(x: Crossover, config: str, conc: int, num_prompts: int) -> list[BenchRun]:
    """The bench runs of `config` at `conc`, one per repeat."""
    return [BenchRun(concurrency=conc, rep=rep, num_prompts=num_prompts, output_len=x.output_len,
                     result_file=result_filename(config, conc, rep, x.repeat))
            for rep in range(1, x.repeat + 1)]


def _value(x: Crossover, d: dict):
    """What the search judges of one result: the metric (> 0), or for a goodput search (good,
    succeeded, duration) from its per-request arrays; None when the result has none."""
    if x.metric != GOODPUT:
        v = d.get(x.metric)
        return None if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0 else float(v)
    counts = good_requests(d.get("ttfts"), d.get("latencies"), d.get("output_lens"), d.get("errors"),
                           x.slo.limits, d.get("itls"))
    duration = float(d.get("duration"))
    return None if counts is None or not duration > 0 else (*counts, duration)


def measured(x: Crossover, result_dir: str, config: str) -> dict[int, list]:
    """concurrency -> values over repeats (_value), for the cells of `config` whose every repeat's file
    is a result."""
    out = {}
    for c in x.grid:
        vals = []
        for run in _runs(x, config, c, 1):
            try:
                with open(os.path.join(result_dir, run.result_file)) as f:
                    vals.append(_value(x, json.load(f)))
            except (OSError, ValueError, AttributeError, TypeError):
                vals.append(None)
        if None not in vals:
            out[c] = vals
    return out


def decide(x: Crossover, result_dir: str, tried: dict[str, set[int]]) -> dict[str, dict]:
    """Per configuration: its judged points, the next concurrencies and why."""
    base = measured(x, result_dir, x.baseline)
    out = {}
    goodput = x.metric == GOODPUT
    for cfg in x.configs + ([x.baseline] if goodput else []):  # a goodput search finds the baseline's too
        mine = measured(x, result_dir, cfg)
        if goodput:
            points = {c: j for c, v in mine.items() if (j := judge_slo(
                v, base.get(c) if cfg != x.baseline else None, x.confidence, x.slo.attainment_pct))}
        else:
            points = {c: j for c, v in mine.items() if c in base
                      and (j := judge(v, base[c], x.confidence, x.tolerance_pct)) is not None}
        todo, why = next_points(x.grid, x.coarse, points, x.budget, tried.get(cfg, set()))
        if goodput:
            top = highest_meeting(points)
            why += ("; highest concurrency measured meeting the SLO: none" if top is None else
                    f"; highest concurrency measured meeting the SLO: {top}"
                    f" ({points[top]['attainment_pct']:.1f} % of requests good, Wilson "
                    f"{x.confidence:.0%} interval {points[top]['attainment_low']:.1f}-"
                    f"{points[top]['attainment_high']:.1f} %)")
        # a cell of the configuration whose baseline is missing needs only the baseline: never redone
        out[cfg] = {"points": {str(c): p for c, p in sorted(points.items())},
                    "next": [c for c in todo if c not in mine], "why": why,
                    "baseline_missing": sorted(c for c in todo if c in mine and c not in base)}
    return out


def _item(base_item: Item, name: str, entries: list[BenchRun]) -> Item:
    # the configuration's server log gets every round's server (appended, a header per start), so the
    # report's KV facts stay per configuration
    fit = base_item.fit and replace(base_item.fit, num_prompts=max(e.num_prompts for e in entries))
    return replace(base_item, name=name, bench=entries, log_name=base_item.name, fit=fit,
                   item_hash=None).hashed(leave_out=("item_hash",))


def crossover_round(x: Crossover, queue: list[Item], result_dir: str, tried: dict[str, set[int]],
                    round_no: int) -> tuple[list[Item], dict]:
    """(the next round's queue items, the decision per configuration), after the items of `queue`.
    `tried` is updated."""
    if not tried:  # what the spec's own items measure counts as tried: a failed cell is not retried here
        for it in queue:
            tried.setdefault(it.configuration, set()).update(b.concurrency for b in it.bench)
    decision = decide(x, result_dir, tried)
    need: dict[str, list[int]] = {cfg: d["next"] for cfg, d in decision.items() if d["next"]}
    base_have = set(measured(x, result_dir, x.baseline))
    base_need = sorted(({c for v in need.values() for c in v}
                        | {c for d in decision.values() for c in d["baseline_missing"]})
                       - base_have - tried.get(x.baseline, set()))
    by_name = {it.name: it for it in queue}
    todo = [(cfg, concs) for cfg, concs in [(x.baseline, base_need),
                                            *((c, v) for c, v in need.items() if c != x.baseline)]
            if concs and cfg in by_name]
    apart = x.server_per_repeat  # the plan's repeat_isolation: server-start (the bastion's)
    # server-start: one item per (repeat, configuration), repeats outermost; else one per configuration
    reps = [[r] for r in range(1, x.repeat + 1)] if apart else [list(range(1, x.repeat + 1))]
    items = []
    for group in reps:
        for cfg, concs in todo:
            by_conc = {c: _runs(x, cfg, c, x.prompts[str(c)]) for c in concs}
            entries = [by_conc[c][k - 1] for k in group for c in concs]  # repeats interleaved across concurrencies
            suffix = f".r{group[0]}" if apart and group[0] > 1 else ""
            items.append(_item(by_name[cfg], f"{cfg}.round{round_no}{suffix}", entries))
    for cfg, concs in todo:
        tried.setdefault(cfg, set()).update(concs)
    return items, decision
