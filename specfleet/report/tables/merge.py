"""Merge the runs of a campaign into the report's tables (pandas DataFrames).

All numbers come from the result JSON (server logs only for KV facts). Values
are means over repeats of one (node, config, concurrency); the speedup of a
configuration is its output tok/s over the **same node's** baseline output tok/s
at the same concurrency (with repeats, measures.speedup_noise makes it the ratio of
geometric means, the centre of its interval).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import pandas as pd

from ...plan.sweep import parse_cell
from ...worker.crossover import request_latencies
from ..scan.folder import CollectedFolder, Run
from .categories import cells_by_category
from .crossover_curve import search_status
from .diagnosis import MIN_WAVES, OVERHEAD_BOUND_FRACTION, bandwidth_of, greedy_divergence, loop_share, waves
from ..gates.gate_policy import metric_value
from .measures import (NoiseBand, add_measures, latency_table, outlier_notes, rate_notes, rate_summary,
                       repeat_meaning)
from ..gates.consistency import result_table
from ..scan.provenance import NOT_RECORDED, node_table

RUN_METRICS = {
    "output_throughput": "output_tok_s",
    "total_token_throughput": "total_tok_s",
    "mean_tpot_ms": "tpot_ms",
    "mean_ttft_ms": "ttft_ms",
    "mean_itl_ms": "itl_ms",
    "duration": "duration_s",
    "total_output_tokens": "output_tokens",
    "completed": "completed",
    "failed": "failed",
}
SPEC_METRICS = {
    "spec_decode_acceptance_rate": "acceptance_rate_pct",
    "spec_decode_acceptance_length": "acceptance_length",
    "spec_decode_num_drafts": "drafts",
    "spec_decode_draft_tokens": "draft_tokens",
    "spec_decode_accepted_tokens": "accepted_tokens",
}
CATEGORY_KEYS = ("categories", "request_categories")
GIB = 1024 ** 3


@dataclass
class Tables:
    runs: pd.DataFrame
    spec: pd.DataFrame
    kv: pd.DataFrame
    provenance: pd.DataFrame
    latency: pd.DataFrame | None = None
    provenance_results: pd.DataFrame | None = None
    noise: NoiseBand | None = None
    bandwidth: pd.DataFrame | None = None
    categories: pd.DataFrame | None = None
    min_tpot_ms: float | None = None   # the bound when every node has the same; else per node in `bandwidth`
    bandwidths: dict[str, Bandwidth] = field(default_factory=dict)   # node -> the bandwidth its bound uses
    bandwidth_warnings: list[str] = field(default_factory=list)      # given figures that contradict a datasheet
    notes: list[str] = field(default_factory=list)
    search: dict[tuple[str, str], str] = field(default_factory=dict)  # crossover.search_status
    outliers: list[str] = field(default_factory=list)  # measures.outlier_notes
    overhead_bound: dict[str, str] = field(default_factory=dict)  # node -> why decode is launch/overhead-bound
    waves_note: str | None = None
    setup_note: str | None = None     # the runner's steady_state=report-setup stamp, said at the top
    rates: dict[str, str] = field(default_factory=dict)  # open-loop cell -> offered vs achieved (measures.rate_summary)
    repeats_note: str | None = None   # measures.repeat_meaning: what the intervals' repeats are


def _mean(vals: list) -> float:
    vals = [float(v) for v in vals if v is not None]
    return statistics.fmean(vals) if vals else math.nan


def _std(vals: list) -> float:
    vals = [float(v) for v in vals if v is not None]
    return statistics.stdev(vals) if len(vals) > 1 else math.nan


def _spec_means(runs: list[Run]) -> dict[str, float]:
    """Spec-decode columns over repeats. A repeat without spec keys drafted nothing
    (vLLM omits the keys when no draft token was made), so it counts as 0 drafts;
    rate and length are pooled: 100 x sum(accepted) / sum(draft tokens),
    1 + sum(accepted) / sum(drafts). A single run keeps the file's own values."""
    nan = {col: math.nan for col in SPEC_METRICS.values()}
    spec = [r.result for r in runs if r.result.has_spec]
    if not spec:
        return nan
    if len(runs) == 1:
        return {col: _mean([getattr(spec[0], key)]) for key, col in SPEC_METRICS.items()}
    drafts = sum(r.result.spec_decode_num_drafts or 0 for r in runs)
    dtok = sum(r.result.spec_decode_draft_tokens or 0 for r in runs)
    acc = sum(r.result.spec_decode_accepted_tokens or 0 for r in runs)
    n = len(runs)
    return {"acceptance_rate_pct": 100.0 * acc / dtok if dtok else math.nan,
            "acceptance_length": 1.0 + acc / drafts if drafts else math.nan,
            "drafts": drafts / n, "draft_tokens": dtok / n, "accepted_tokens": acc / n}


def runs_table(camp: CollectedFolder, baseline: str) -> pd.DataFrame:
    """The §4.1 table for all concurrencies: one row per (conc, config, node)."""
    order = {c: i for i, c in enumerate(sorted(camp.configs, key=lambda c: c != baseline))}  # the baseline first
    rows = []
    groups = camp.groups()
    for (cell, cfg, host), runs in groups.items():
        dims = parse_cell(cell) or {}
        row = {"concurrency": runs[0].conc, "cell": cell, "output_len": dims.get("output_len"),
               "category": dims.get("category"), "config": cfg, "node": host, "repeats": len(runs)}
        for key, col in RUN_METRICS.items():
            row[col] = _mean([getattr(r.result, key) for r in runs])
        row["output_tok_s_std"] = _std([r.result.output_throughput for r in runs])
        row["tpot_weighted_ms"] = _mean([metric_value(r.result, "tpot_weighted_ms") for r in runs])
        row["waves"] = _mean([waves(r.result) for r in runs])
        share = loop_share(runs)
        row["loop_share_pct"] = math.nan if share is None else 100.0 * share
        div = greedy_divergence(runs, groups.get((cell, baseline, host), [])) if cfg != baseline else None
        row["greedy_differs_pct"] = math.nan if div is None else 100.0 * div[0]
        row.update(_spec_means(runs))
        row["has_spec_keys"] = any(r.result.has_spec for r in runs)
        row["simulated"] = any(r.result.simulated for r in runs)
        row["_order"] = order[cfg]
        rows.append(row)
    cols = ["concurrency", "config", "node", "repeats", *RUN_METRICS.values(), "output_tok_s_std",
            *SPEC_METRICS.values(), "has_spec_keys", "simulated", "cell", "output_len", "category",
            "tpot_weighted_ms", "waves", "loop_share_pct", "greedy_differs_pct"]
    if not rows:
        return pd.DataFrame(columns=["speedup", *cols])
    df = pd.DataFrame(rows).sort_values(["concurrency", "cell", "_order", "node"]).drop(columns="_order")
    # the same node's baseline in the same bench cell: pairing needs the same cell on the same node
    base = df[df.config == baseline].set_index(["node", "cell"])["output_tok_s"]
    df["speedup"] = [out / base.get((n, c), math.nan) for n, c, out in
                     zip(df.node, df.cell, df.output_tok_s)]
    cols.insert(4, "speedup")
    return df[cols].reset_index(drop=True)


def spec_table(runs: pd.DataFrame, baseline: str) -> pd.DataFrame:
    cols = ["concurrency", "config", "node", *SPEC_METRICS.values(), "drafts_per_step",
            "output_tokens", "has_spec_keys", "cell"]
    return runs[runs.config != baseline][cols].reset_index(drop=True)


def kv_table(camp: CollectedFolder) -> pd.DataFrame:
    maxconc = {}
    for r in camp.runs:
        maxconc[(r.host, r.config)] = max(maxconc.get((r.host, r.config), 0), r.conc)
    rows = []
    for f in camp.kv:
        c = maxconc.get((f.host, f.config))
        demand = (100.0 * c * f.tokens_per_request / f.kv_tokens
                  if c and f.tokens_per_request and f.kv_tokens else math.nan)
        rows.append({"node": f.host, "config": f.config, "device": f.device or "",
                     "weights_gib": f.weights_gib, "kv_budget_gib": f.kv_budget_gib,
                     "kv_tokens": f.kv_tokens, "tokens_per_request": f.tokens_per_request,
                     "max_concurrency_x": f.max_concurrency, "max_measured_conc": c,
                     "worst_case_kv_demand_pct": demand})
    return pd.DataFrame(rows, columns=["node", "config", "device", "weights_gib", "kv_budget_gib",
                                       "kv_tokens", "tokens_per_request", "max_concurrency_x",
                                       "max_measured_conc", "worst_case_kv_demand_pct"])


def bandwidth_table(runs: pd.DataFrame, bandwidths: dict[str, "Bandwidth"], weights_gib: float
                    ) -> pd.DataFrame:
    """Lowest TPOT if every step must read all weights once: weights / the node's bandwidth.
    fraction = bound / measured TPOT (1.0 = at the bound; > 1 only possible when a
    step yields more than one token per request, i.e. speculative decoding). Where a given bandwidth
    contradicts the node's GPU datasheet, the datasheet's bound and fraction stand beside it."""
    df = runs[["concurrency", "config", "node", "tpot_ms"]].copy()
    df = df[df.node.isin(list(bandwidths))]
    bw = [bandwidths[n] for n in df.node]
    df["bandwidth_gbps"] = [b.gbps for b in bw]
    df["bound_tpot_ms"] = [bound_ms(weights_gib, b.gbps) for b in bw]
    df["fraction_of_bound"] = df["bound_tpot_ms"] / df["tpot_ms"]
    if any(b.conflict for b in bw):
        df["datasheet_gbps"] = [b.datasheet if b.conflict else math.nan for b in bw]
        df["datasheet_bound_tpot_ms"] = [bound_ms(weights_gib, b.datasheet) if b.conflict else math.nan for b in bw]
        df["datasheet_fraction"] = df["datasheet_bound_tpot_ms"] / df["tpot_ms"]
    # a flagged cell's bound / TPOT (e.g. > 1 from a model that loops) is no speculative-decoding figure
    df["acceptance_flag"] = runs.loc[df.index, "acceptance_flag"] if "acceptance_flag" in runs else ""
    return df.reset_index(drop=True)


def bound_ms(weights_gib: float, gbps: float) -> float:
    return weights_gib * GIB / (gbps * 1e9) * 1000.0


#: a given bandwidth further than this from the named GPU's datasheet is shown beside it, with a warning
BANDWIDTH_MISMATCH = 0.05


@dataclass(frozen=True)
class Bandwidth:
    """One node's GPU memory bandwidth for the bound: the figure used, where it came from, and the
    datasheet's figure for the GPU the node named when the given one contradicts it."""
    gbps: float
    source: str                    # "--gpu-bandwidth-gbps", "inventory" or the datasheet's name
    gpu: str = ""
    datasheet: float | None = None
    datasheet_source: str = ""

    @property
    def conflict(self) -> bool:
        return self.datasheet is not None and abs(self.gbps / self.datasheet - 1) > BANDWIDTH_MISMATCH


def node_bandwidths(gpus: dict[str, str], given: float | dict[str, float] | None
                    ) -> tuple[dict[str, Bandwidth], list[str]]:
    """Each node's bandwidth (node -> GPU name as recorded; `given`: one figure for all from
    --gpu-bandwidth-gbps, or per node from the inventory as collect saved it) and the warnings: a given
    figure more than BANDWIDTH_MISMATCH from the named GPU's datasheet is used, and the datasheet's
    shown beside it, never silently trusted."""
    out, warns = {}, []
    for node, gpu in sorted(gpus.items()):
        explicit = given if isinstance(given, (int, float)) else (given or {}).get(node)
        looked = bandwidth_of(gpu) if gpu and gpu != NOT_RECORDED else None
        if explicit:
            src = "--gpu-bandwidth-gbps" if isinstance(given, (int, float)) else "inventory gpu_memory_bandwidth_gbps"
            b = Bandwidth(float(explicit), src, gpu, *(looked or (None, "")))
            if b.conflict:
                warns.append(f"GPU memory bandwidth on {node}: {b.gbps:g} GB/s given ({src}), but its GPU "
                             f"\"{gpu}\" has {b.datasheet:g} GB/s by its datasheet ({b.datasheet_source}), "
                             f"{(b.gbps / b.datasheet - 1) * 100:+.0f} %: the bound uses the given figure, the "
                             "datasheet's bound and fraction stand beside it; check the GPU or the figure")
            out[node] = b
        elif looked:
            out[node] = Bandwidth(looked[0], looked[1], gpu)
    return out, warns


def _request_tpots(run: Run) -> list[tuple[str, float]] | None:
    res = run.result
    cats = next((res.extra[k] for k in CATEGORY_KEYS if isinstance(res.extra.get(k), list)), None)
    lats = request_latencies(res.ttfts, res.latencies, res.itls)  # TTFT + ITLs where vLLM < 0.30 has no latencies
    if cats is None or not res.has_detail or lats is None:
        return None
    n = len(cats)
    if not (len(lats) == len(res.ttfts) == len(res.output_lens) == n):
        return None
    out = []
    for cat, lat, ttft, ol in zip(cats, lats, res.ttfts, res.output_lens):
        if ol and ol > 1:
            out.append((str(cat), (lat - ttft) / (ol - 1) * 1000.0))
    return out


def category_table(camp: CollectedFolder, baseline: str) -> tuple[pd.DataFrame | None, str | None]:
    """Per Spec-Bench category mean TPOT and TPOT speedup vs the same node's baseline.
    Needs --save-detailed arrays and a per-request category list in the JSON
    (key `categories`/`request_categories`); vLLM itself records none."""
    rows = []
    for (cell, cfg, host), runs in camp.groups().items():
        conc = runs[0].conc
        per: dict[str, list[float]] = {}
        for cat, v in (x for r in runs for x in _request_tpots(r) or []):
            per.setdefault(cat, []).append(v)
        for cat, vals in per.items():
            rows.append({"concurrency": conc, "config": cfg, "node": host, "category": cat,
                         "requests": len(vals), "tpot_ms": statistics.fmean(vals)})
    if not rows:
        return None, ("per-category table skipped: the result files have no per-request arrays "
                      "(--save-detailed) with a request-to-category mapping, and no per-category bench "
                      "cells (benchmark.sweep: {category: [...]}, docs/campaign.md \"Plans that sweep\")")
    df = pd.DataFrame(rows)
    base = df[df.config == baseline].set_index(["node", "concurrency", "category"])["tpot_ms"]
    df["tpot_speedup"] = [base.get((n, c, k), math.nan) / t for n, c, k, t in
                          zip(df.node, df.concurrency, df.category, df.tpot_ms)]
    return df.sort_values(["concurrency", "category", "config", "node"]).reset_index(drop=True), None


def build_tables(camp: CollectedFolder, baseline: str, gpu_bandwidth_gbps: float | dict[str, float] | None = None,
                 weights_gib: float | None = None, noise: NoiseBand | None = None) -> Tables:
    noise = noise or NoiseBand()
    runs = add_measures(camp, runs_table(camp, baseline), baseline, noise)
    t = Tables(runs=runs, spec=spec_table(runs, baseline), kv=kv_table(camp),
               provenance=node_table(camp), latency=latency_table(camp, runs), noise=noise,
               provenance_results=result_table(camp), search=search_status(camp.nodes),
               outliers=outlier_notes(camp), repeats_note=repeat_meaning(camp), notes=rate_notes(camp),
               rates=rate_summary(camp))
    measured = runs[runs.config == baseline]
    missing = sorted({f"{n}@{c}" for n, c in zip(runs.node, runs.cell)} -
                     {f"{n}@{c}" for n, c in zip(measured.node, measured.cell)})
    if missing:
        t.notes.append(f"no '{baseline}' run on {', '.join(missing)}: speedup there is not computed")
    if weights_gib is None:
        logged = [f.weights_gib for f in camp.kv if f.config == baseline and f.weights_gib]
        if logged:
            weights_gib = max(logged)
            t.notes.append(f"weights size {weights_gib:g} GiB taken from the '{baseline}' server log")
    gpus = dict(zip(t.provenance.node, t.provenance.gpu))
    t.bandwidths, t.bandwidth_warnings = node_bandwidths(gpus, gpu_bandwidth_gbps)
    for gbps, src in sorted({(b.gbps, b.source) for b in t.bandwidths.values() if b.datasheet is None
                             and b.source not in ("--gpu-bandwidth-gbps", "inventory gpu_memory_bandwidth_gbps")}):
        named = sorted({b.gpu for b in t.bandwidths.values() if (b.gbps, b.source) == (gbps, src)})
        t.notes.append(f"GPU memory bandwidth {gbps:g} GB/s looked up for {', '.join(named)} "
                       f"({src}); --gpu-bandwidth-gbps or the inventory's gpu_memory_bandwidth_gbps overrides")
    t.notes += t.bandwidth_warnings
    if t.bandwidths and weights_gib:
        t.bandwidth = bandwidth_table(runs, t.bandwidths, weights_gib)
        bounds = sorted(set(t.bandwidth.bound_tpot_ms))
        t.min_tpot_ms = bounds[0] if len(bounds) == 1 else None   # else per node, in the table
        base = t.bandwidth[t.bandwidth.config == baseline]
        for node, rows in base.groupby("node"):
            worst = rows.loc[rows.fraction_of_bound.idxmax()]
            if worst.fraction_of_bound < OVERHEAD_BOUND_FRACTION:
                t.overhead_bound[node] = (
                    f"decode on {node} runs at {worst.fraction_of_bound:.2f} of the memory-bandwidth bound at best "
                    f"('{baseline}' TPOT {worst.tpot_ms:.2f} ms vs {worst.bound_tpot_ms:.3f} ms to read {weights_gib:g} GiB "
                    f"of weights at {worst.bandwidth_gbps:g} GB/s): the step is launch/overhead-bound (kernel launches, "
                    "scheduling, sampling), not bound by weight reads, and speculation saves weight reads, so no "
                    "speculation can pay there")
        missing = sorted(set(gpus) - set(t.bandwidths))
        if missing:
            t.notes.append(f"memory-bandwidth bound not computed for {', '.join(missing)}: its GPU is not in the "
                           "look-up; give gpu_memory_bandwidth_gbps in the inventory or --gpu-bandwidth-gbps")
    else:
        t.notes.append("memory-bandwidth bound not computed: give the GPU bandwidth (GB/s, --gpu-bandwidth-gbps; "
                       "looked up from the GPU name for common data-centre GPUs) and the weights' size (GiB)")
    one_wave = [f"{c} ({w:.1f} waves)" for c, w in
                runs.groupby("cell").waves.min().items() if w == w and w < MIN_WAVES]
    if one_wave:
        t.waves_note = (f"few waves: {', '.join(one_wave)} -- completed requests / max concurrency below "
                        f"{MIN_WAVES:g}: the run is a wave that drains, its output tok/s follows the last requests; "
                        "judge by token-weighted TPOT, or measure a steady state (more prompts per concurrency)")
        t.notes.append(t.waves_note)
    stamped = [r for r in camp.runs if str(r.result.extra.get("steady_state") or "") == "report-setup"]
    if stamped:
        t.setup_note = (f"REPORT SETUP: the runner stamped steady_state=report-setup on {len(stamped)} of "
                        f"{len(camp.runs)} runs: the plan reproduced the field report's prompts per concurrency "
                        "on purpose, so a cell of few waves is its choice, and its output tok/s still follows "
                        "the last requests of a wave that drains")
    t.categories, note = category_table(camp, baseline)
    if t.categories is None:  # per-category bench cells (--spec-bench-category): exact server counters
        t.categories, note = cells_by_category(runs, baseline), note if not runs.category.notna().any() else None
    if note:
        t.notes.append(note)
    return t
