"""One file per merged cell in llm-d's Benchmark Report v0.2 (docs/export.md: the fields written),

    results/<campaign>/report/llm-d-v0.2/<config>__<cell>__<node>.json

against llm-d-benchmark's `benchmark_report/schema_v0_2.py` (pydantic, `extra="forbid"` at every level;
read at commit 08e0c227ecc1afe3f411f6c36fa2b1c9d71c8647): only its fields are written. With repeats
every figure is the mean over runs of each run's statistic (the report's rule). A figure the result
files do not carry is left out (the schema's fields are optional), never 0.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any

from ...worker.slots import parallel_sizes
from ..gates.consistency import result_table
from ..tables.measures import PCT_KEY
from ..scan.provenance import NOT_RECORDED, node_table

BR_VERSION = "0.2"
# merged.json / merged.csv: every row carries it; docs/schemas/merged.schema.json describes that version
MERGED_SCHEMA_VERSION = 1
COMPONENT_SCHEMA = "0.0.1"
EXPORT_DIR = Path("report") / "llm-d-v0.2"  # under the campaign folder: "report" is not a host folder
# vLLM's latency keys -> the schema's AggregateLatency field and units
LATENCY = {"ttft": ("time_to_first_token", "ms"), "tpot": ("time_per_output_token", "ms/token"),
           "itl": ("inter_token_latency", "ms/token"), "e2el": ("request_latency", "ms")}
SCHEMA_PCTS = {"0.1": "p0p1", "1": "p1", "5": "p5", "10": "p10", "25": "p25", "50": "p50", "75": "p75",
               "90": "p90", "95": "p95", "99": "p99", "99.9": "p99p9"}


def _mean(vals: list) -> float | None:
    vals = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return statistics.fmean(vals) if vals else None


def _num(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


def _stat(results: list, metric: str, units: str) -> dict | None:
    mean = _mean([getattr(r, f"mean_{metric}_ms", None) for r in results])
    if mean is None:
        return None
    st: dict[str, Any] = {"units": units, "mean": mean}
    for key, field in (("std", "stddev"), ("median", "p50")):
        if (v := _mean([getattr(r, f"{key}_{metric}_ms", None) for r in results])) is not None:
            st[field] = v
    keys = {k for r in results for k in (*r.extra, *type(r).model_fields) if (m := PCT_KEY.match(k)) and m[2] == metric}
    for k in sorted(keys, key=lambda k: float(PCT_KEY.match(k)[1])):  # a set: its order varies per process
        p = PCT_KEY.match(k)[1].removesuffix(".0")
        if p in SCHEMA_PCTS and (v := _mean([getattr(r, k, None) for r in results])) is not None:
            st[SCHEMA_PCTS[p]] = v
    return st


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


def _when(dates: list[str]) -> dict:
    ts = []
    for d in dates:
        try:
            ts.append(datetime.strptime(d, "%Y%m%d-%H%M%S"))
        except (TypeError, ValueError):
            continue
    return {"start": min(ts).isoformat(), "end": max(ts).isoformat()} if ts else {}


def _h(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def cell_report(row: dict, runs: list, node: dict, result: dict, *, campaign: str, plan_hash: str,
                model_name: str, gate_verdict: str, gate_rule: str, simulated: bool, serve_argv: list[str],
                bench: dict) -> dict:
    """The Benchmark Report v0.2 document of one merged row (the report's merged.json row `row`)."""
    res = [r.result for r in runs]
    sizes = parallel_sizes(serve_argv)
    tp, pp, dp = (sizes.get(f, 1) for f in ("--tensor-parallel-size", "--pipeline-parallel-size",
                                            "--data-parallel-size"))
    gpus = node.get("gpus")
    count = gpus if isinstance(gpus, int) and gpus >= tp * pp * dp else tp * pp * dp
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
        {"metadata": {"kind": "inference_engine", "schema_version": COMPONENT_SCHEMA,
                      "label": f"{row['node']}/{row['config']}", "cfg_id": _h(serve_argv),
                      "description": result.get("speculative_config") or None},
         "standardized": {"tool": "vllm", "tool_version": version, "role": "replica", "model": {"name": model_name},
                          "accelerator": {"model": str(node.get("gpu") or NOT_RECORDED), "count": int(count),
                                          "parallelism": {"dp": dp, "ep": 1, "pp": pp, "tp": tp}}},
         "native": {"args": _args(serve_argv[3:])}},
        {"metadata": {"kind": "generic", "schema_version": COMPONENT_SCHEMA, "label": "specfleet",
                      "cfg_id": plan_hash, "description": words},
         "standardized": {"tool": "specfleet", "tool_version": _version(), "campaign": campaign,
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
    latency = {field: s for m, (field, units) in LATENCY.items() if (s := _stat(res, m, units))}
    requests: dict[str, Any] = {"total": int(sum(r.completed + (r.failed or 0) for r in res)),
                                "failures": int(sum(r.failed or 0 for r in res))}
    for key, arrays in (("input_length", [r.input_lens for r in res]), ("output_length", [r.output_lens for r in res])):
        if (s := _count_stat(arrays)) is not None:
            requests[key] = s
    throughput = {k: s for k, s in (("output_token_rate", _rate(res, "output_throughput", "tokens/s")),
                                    ("total_token_rate", _rate(res, "total_token_throughput", "tokens/s")),
                                    ("requests_rate", _rate(res, "request_throughput", "queries/s"))) if s}
    dur = sum(r.duration for r in res)
    return {
        "version": BR_VERSION,
        "run": {"uid": _h(campaign, plan_hash, row["config"], row["cell"], row["node"]), "eid": _h(campaign, plan_hash),
                "time": {**_when([r.date for r in res if r.date]), "duration": f"PT{dur:.6f}S"}},
        "scenario": {"stack": stack,
                     "load": {"metadata": {"schema_version": COMPONENT_SCHEMA, "cfg_id": _h(bench, row["cell"]),
                                           "description": f"Spec-Bench prompts, {row['cell']}; figures are means "
                                                          f"over {len(res)} run(s) of each run's statistic"},
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
    from ...campaign.commands import Paths, serve_argv
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
            argv = serve_argv(plan, row["config"], Paths(venv="", work_dir=""))
        except KeyError:
            argv = []
        doc = cell_report(row, runs, nodes.get(row["node"], {}), results.get((row["node"], row["config"]), {}),
                          campaign=plan.campaign, plan_hash=plan_hash, model_name=plan.model.name,
                          gate_verdict=gate_verdict, gate_rule=gate_rule, simulated=bool(row.get("simulated")),
                          serve_argv=argv, bench={"output_len": _num(row.get("output_len")) or b.output_len})
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
