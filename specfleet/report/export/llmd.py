"""One file per merged cell in llm-d's Benchmark Report v0.2 (docs/export.md: the fields written),

    results/<campaign>/report/llm-d-v0.2/<config>__<cell>__<node>.json

against llm-d-benchmark's `llmdbenchmark/analysis/benchmark_report/schema_v0_2.py` (pydantic,
`extra="forbid"` at every level; read at commit 8bc9f1ddd873a24f1657d6cca2e0d0fb6947dd36, 2026-08-21;
tests/report/test_export_llmd.py holds the project's translation of it and validates every file):
only its fields are written. Latency statistics (mean, deviation, percentiles) are computed over the
per-request values of all the cell's runs pooled; throughput is the mean over runs. A figure the result
files do not carry is left out (the schema's fields are optional), never 0.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ...worker.runspec import Serve
from ..gates.consistency import result_table
from ..scan.provenance import NOT_RECORDED, node_table
from ..render.telemetry_report import of_run, request_window

BR_VERSION = "0.2"
COMPONENT_SCHEMA = "0.0.1"
EXPORT_DIR = Path("report") / "llm-d-v0.2"  # under the campaign folder: "report" is not a host folder
# vLLM's latency keys -> the schema's AggregateLatency field and units
LATENCY = {"ttft": ("time_to_first_token", "ms"), "tpot": ("time_per_output_token", "ms/token"),
           "itl": ("inter_token_latency", "ms/token"), "e2el": ("request_latency", "ms")}
SCHEMA_PCTS = {"0.1": "p0p1", "1": "p1", "5": "p5", "10": "p10", "25": "p25", "50": "p50", "75": "p75",
               "90": "p90", "95": "p95", "99": "p99", "99.9": "p99p9"}
POOLED = "pooled"   # _latency: how the statistics were made (the load's description says it)


def _mean(vals: list) -> float | None:  # over runs (throughput, prompt tokens)
    vals = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return statistics.fmean(vals) if vals else None


def _num(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


def _per_request_ms(r) -> dict[str, list[float]]:
    """One run's per-request latencies in ms over its succeeded requests, as vLLM's calculate_metrics
    defines them: TTFT, TPOT = (latency - TTFT) / (output tokens - 1) for > 1 token, every ITL, latency
    (latency, or TTFT + the ITLs where the file has no `latencies`). A metric the arrays cannot give is
    absent."""
    n = len(r.ttfts or [])
    if not n or len(r.output_lens or []) != n:
        return {}
    itls = r.itls if r.itls and len(r.itls) == n else None
    lat = r.latencies if r.latencies and len(r.latencies) == n else (
        [t + sum(g) for t, g in zip(r.ttfts, itls)] if itls else None)
    ok = [i for i in range(n) if not (r.errors and i < len(r.errors) and r.errors[i]) and r.output_lens[i]]
    out = {"ttft": [r.ttfts[i] * 1000 for i in ok]}
    if lat:
        out["e2el"] = [lat[i] * 1000 for i in ok]
        out["tpot"] = [(lat[i] - r.ttfts[i]) / (r.output_lens[i] - 1) * 1000 for i in ok if r.output_lens[i] > 1]
    if itls:
        out["itl"] = [x * 1000 for i in ok for x in itls[i]]
    return out


def _stat(results: list, metric: str, units: str) -> tuple[dict | None, str]:
    """The metric's statistics over every request of the runs pooled (POOLED); without the per-request
    arrays in every run, only the mean (the runs' means weighted by their completed requests)."""
    runs = [_per_request_ms(r).get(metric) for r in results]
    if all(runs) and (vals := np.array([x for v in runs for x in v])).size:
        st: dict[str, Any] = {"units": units, "mean": float(vals.mean()), "stddev": float(vals.std()),
                              "min": float(vals.min()), "max": float(vals.max())}
        for p, field in SCHEMA_PCTS.items():
            st[field] = float(np.percentile(vals, float(p)))
        return st, POOLED
    means = [(v, r.completed) for r in results if isinstance(v := getattr(r, f"mean_{metric}_ms", None), (int, float))
             and math.isfinite(v) and r.completed]
    if len(means) < len(results) or not means:
        return None, ""
    return {"units": units, "mean": sum(v * c for v, c in means) / sum(c for _, c in means)}, "means"


def _count_stat(values: list[list[int] | None]) -> dict | None:
    flat = [x for v in values if v for x in v]
    if not flat:
        return None
    return {"units": "count", "mean": statistics.fmean(flat), "min": min(flat), "max": max(flat),
            "stddev": statistics.pstdev(flat)}


def _rate(results: list, key: str, units: str) -> dict | None:
    v = _mean([getattr(r, key, None) for r in results])
    return None if v is None else {"units": units, "mean": v}


def _args(argv: list[str]) -> dict[str, Any]:
    """`--flag value` words as the schema's native args mapping (a bare flag maps to null)."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        w = argv[i]
        if w.startswith("-"):
            if "=" in w:
                k, v = w.split("=", 1)
                out[k] = v
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[w] = argv[i + 1]
                i += 1
            else:
                out[w] = None
        i += 1
    return out


def _measured(run) -> tuple[datetime, datetime] | None:
    """The run's measured window (its first request's start to its last one's end) in UTC, placed by the
    telemetry's monotonic stamps (the clock of vLLM's start_times) and the wall clock beside them."""
    w, tel = request_window(run.result), of_run(run)
    if isinstance(w, str) or tel is None:
        return None
    at = next((p for pts in tel.power.values() for p in pts if p[1] is not None), None)
    if at is None:
        return None
    utc = lambda x: datetime.fromtimestamp(x + at[0] - at[1], tz=timezone.utc)  # noqa: E731
    return utc(w[0]), utc(w[1])


def _when(runs: list) -> dict:
    """time.start / end of the measurement: the runs' measured windows in UTC where their telemetry
    places them; else vLLM's `date` (the worker's local time, no zone, written as the run's result is
    saved, right after its last request) as the end and that minus the run's duration as the start."""
    spans = []
    for r in runs:
        if (m := _measured(r)) is not None:
            spans.append(m)
            continue
        try:
            end = datetime.strptime(r.result.date or "", "%Y%m%d-%H%M%S")
        except ValueError:
            continue
        spans.append((end - timedelta(seconds=r.result.duration), end))
    if not spans or len({s[0].tzinfo is None for s in spans}) > 1:  # UTC and local times do not mix
        return {}
    return {"start": min(s for s, _ in spans).isoformat(), "end": max(e for _, e in spans).isoformat()}


def _h(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def cell_report(row: dict, runs: list, node: dict, result: dict, *, campaign: str, plan_hash: str,
                model_name: str, gate_verdict: str, gate_rule: str, simulated: bool, serve_argv: list[str],
                bench: dict, serve: Serve | None = None) -> dict:
    """The Benchmark Report v0.2 document of one merged row (the report's merged.json row `row`);
    `serve`: the configuration's server as the plan gives it, its argv `serve_argv` (None, []: the plan
    no longer has it)."""
    res = [r.result for r in runs]
    tp, pp, dp = (1, 1, 1) if serve is None else (serve.tensor_parallel_size or 1, serve.pipeline_parallel_size or 1,
                                                  serve.data_parallel_size or 1)
    # the server's GPUs: the lane's GPU set its results name, else what its flags take (not the node's)
    lane = {g for r in res if (u := r.extra.get("gpu_uuids")) for g in str(u).split(",") if g}
    count = len(lane) or tp * pp * dp
    version = str(node.get("vllm") or NOT_RECORDED)
    spec = {k: _num(row.get(k)) for k in ("acceptance_rate_pct", "acceptance_length", "drafts", "draft_tokens",
                                          "accepted_tokens", "drafts_per_step")}
    speedup = {k: _num(row.get(k)) for k in ("speedup", "speedup_ci_low", "speedup_ci_high")}
    speedup.update(method=row.get("speedup_method") or None, verdict=row.get("speedup_verdict") or None)
    words = (f"specfleet campaign {campaign} (plan {plan_hash}), configuration {row['config']} on {row['node']}, "
             f"bench cell {row['cell']}, {len(res)} run(s); node-equivalence gate {gate_verdict}"
             + (f"; speedup {speedup['speedup']:.3f}x ({speedup['verdict']})" if speedup["speedup"] else "")
             + ("; SIMULATED ENGINE: not a measurement" if simulated else ""))
    stack = [
        {"metadata": {"schema_version": COMPONENT_SCHEMA,
                      "label": f"{row['node']}/{row['config']}", "cfg_id": _h(serve_argv),
                      "description": result.get("speculative_config") or None},
         "standardized": {"kind": "inference_engine", "tool": "vllm", "tool_version": version, "role": "replica",
                          "replicas": 1, "model": {"name": model_name},
                          "accelerator": {"model": str(node.get("gpu") or NOT_RECORDED), "count": int(count),
                                          "parallelism": {"dp": dp, "ep": 1, "pp": pp, "tp": tp}}},
         "native": {"args": _args(serve_argv[3:])}},
        {"metadata": {"schema_version": COMPONENT_SCHEMA, "label": "specfleet",
                      "cfg_id": plan_hash, "description": words},
         "standardized": {"kind": "generic", "tool": "specfleet", "tool_version": _version(), "campaign": campaign,
                          "plan_hash": plan_hash, "node": row["node"], "configuration": row["config"],
                          "cell": row["cell"], "concurrency": int(row["concurrency"]), "repeats": len(res),
                          "simulated": simulated, "spec_decode": spec, "speedup_vs_baseline": speedup,
                          "acceptance_flag": row.get("acceptance_flag") or None,
                          "gate": {"verdict": gate_verdict, "rule": gate_rule}},
         "native": {}},
    ]
    rates = [r.request_rate for r in res if isinstance(r.request_rate, (int, float)) and math.isfinite(r.request_rate)]
    load_std: dict[str, Any] = {"tool": "vllm-bench-serve", "tool_version": version, "source": "sampled",
                                "concurrency": int(row["concurrency"])}
    if (ins := _count_stat([r.input_lens for r in res])) is not None:
        load_std["input_seq_len"] = {"distribution": "other", "value": max(1.0, ins["mean"]),
                                     "std_dev": ins["stddev"], "min": ins["min"], "max": ins["max"]}
    else:  # required by the schema: the mean prompt tokens from the totals
        load_std["input_seq_len"] = {"distribution": "other", "value": max(1.0, _mean(
            [r.total_input_tokens / r.completed for r in res if r.total_input_tokens]) or 1.0)}
    if bench.get("output_len"):
        load_std["output_seq_len"] = {"distribution": "other", "value": int(bench["output_len"]),
                                      "max": int(bench["output_len"])}
    if rates and min(rates) > 0:
        load_std["rate_qps"] = statistics.fmean(rates)
    stats = {field: _stat(res, m, units) for m, (field, units) in LATENCY.items()}
    latency = {field: st for field, (st, _) in stats.items() if st}
    pooled = sorted(f for f, (st, how) in stats.items() if st and how == POOLED)
    means = sorted(f for f, (st, how) in stats.items() if st and how != POOLED)
    how = "; ".join(filter(None, [
        f"{', '.join(pooled)}: statistics over the {sum(r.completed for r in res)} requests of the {len(res)} run(s) "
        "pooled (per-request arrays)" if pooled else "",
        f"{', '.join(means)}: mean only (the runs' means weighted by their requests; no per-request arrays)"
        if means else "", "throughput: mean over the runs"]))
    requests: dict[str, Any] = {"total": int(sum(r.completed + (r.failed or 0) for r in res)),
                                "failures": int(sum(r.failed or 0 for r in res))}
    for key, arrays in (("input_length", [r.input_lens for r in res]), ("output_length", [r.output_lens for r in res])):
        if (s := _count_stat(arrays)) is not None:
            requests[key] = s
    throughput = {k: s for k, s in (("output_token_rate", _rate(res, "output_throughput", "tokens/s")),
                                    ("total_token_rate", _rate(res, "total_token_throughput", "tokens/s")),
                                    ("request_rate", _rate(res, "request_throughput", "queries/s"))) if s}
    dur = sum(r.duration for r in res)
    return {
        "version": BR_VERSION,
        "run": {"uid": _h(campaign, plan_hash, row["config"], row["cell"], row["node"]), "eid": _h(campaign, plan_hash),
                "time": {**_when(runs), "duration": f"PT{dur:.6f}S"}},
        "scenario": {"stack": stack,
                     "load": {"metadata": {"schema_version": COMPONENT_SCHEMA, "cfg_id": _h(bench, row["cell"]),
                                           "description": f"Spec-Bench prompts, {row['cell']}; {how}"},
                              "standardized": load_std, "native": {"args": _args(bench.get("argv") or [])}}},
        "results": {"request_performance": {"aggregate": {"requests": requests, "latency": latency,
                                                          "throughput": throughput}}},
    }


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("specfleet")
    except Exception:  # noqa: BLE001 (a checkout without metadata)
        return "unknown"


def export_cells(campaign_dir: Path, camp, tables, plan, gate_verdict: str, gate_rule: str,
                 plan_hash: str) -> list[Path]:
    """Write one file per merged row, stamped with `plan_hash`, the plan hash its results carry (a file
    whose content is the same is left as it is; files of rows no longer merged are removed); returns
    their paths."""
    from ...campaign.commands import Paths, serve_spec
    out_dir = Path(campaign_dir) / EXPORT_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    nodes = {r["node"]: r for r in node_table(camp).to_dict("records")}
    results = {(r["node"], r["config"]): r for r in result_table(camp).to_dict("records")}
    groups = camp.groups()
    b = plan.benchmark
    paths = []
    for row in tables.runs.to_dict("records"):
        runs = groups.get((row["cell"], row["config"], row["node"]), [])
        if not runs:
            continue
        try:
            serve = serve_spec(plan, row["config"], Paths(venv="", work_dir=""))
        except KeyError:
            serve = None
        argv = [] if serve is None else serve.argv(model=None, host=plan.server.host, port=plan.server.port)
        doc = cell_report(row, runs, nodes.get(row["node"], {}), results.get((row["node"], row["config"]), {}),
                          campaign=plan.campaign, plan_hash=plan_hash, model_name=plan.model.name,
                          gate_verdict=gate_verdict, gate_rule=gate_rule, simulated=bool(row.get("simulated")),
                          serve_argv=argv, serve=serve, bench={"output_len": _num(row.get("output_len")) or b.output_len})
        safe = lambda s: re.sub(r"[^A-Za-z0-9_.-]", "_", str(s))  # noqa: E731
        p = out_dir / f"{safe(row['config'])}__{safe(row['cell'])}__{safe(row['node'])}.json"
        text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
        if not p.is_file() or p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")
        paths.append(p)
    remove_stale(campaign_dir, keep=paths)
    return paths


def remove_stale(campaign_dir: Path, keep: list[Path] = ()) -> None:
    """A refused merge must not leave older export files looking current (report.py does the same)."""
    for old in (Path(campaign_dir) / EXPORT_DIR).glob("*.json"):
        if old not in keep:
            old.unlink()
