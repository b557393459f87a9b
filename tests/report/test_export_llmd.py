"""The llm-d Benchmark Report v0.2 export: one file per merged cell, checked against the schema as
llm-d-benchmark defines it today: `llmdbenchmark/analysis/benchmark_report/schema_v0_2.py`,
`schema_v0_2_components.py` and the units of `base.py` at commit
8bc9f1ddd873a24f1657d6cca2e0d0fb6947dd36 (2026-08-21, the repository's newest snapshot read on
2026-12-06), translated field by field to JSON Schema below (the project's own translation, not a copy).
Every pydantic model there forbids extra fields (additionalProperties false) except `Statistics`
(no model_config: unknown keys ignored) and the generic component's standardized section (extra
allowed). The version string is still "0.2", but since the commit the export was first written
against (08e0c227, 2026-01-09) `kind` moved from a component's metadata into its standardized
section (the discriminator), an inference engine requires `replicas`, `requests_rate` became
`request_rate`, and the load gained `parallelism` and source `unknown`."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from compare_builder import campaign, plan_raw
from specfleet.plan import parse_plan
from specfleet.yamlfile import load_yaml
from specfleet.report.export.llmd import EXPORT_DIR
from specfleet.report.build import report_plan

ROOT = Path(__file__).resolve().parents[2]
LLMD_COMMIT = "8bc9f1ddd873a24f1657d6cca2e0d0fb6947dd36"
NUM = {"type": ["number", "integer"]}
NUM_OR_NULL = {"type": ["number", "integer", "null"]}
STR = {"type": "string"}
STR_OR_NULL = {"type": ["string", "null"]}


def obj(props: dict, required=(), extra=False) -> dict:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": extra}


def opt(schema: dict) -> dict:
    """A pydantic `X | None = None` field: the value or null."""
    return {"anyOf": [schema, {"type": "null"}]}


def int_min(lo: int, null: bool = True) -> dict:
    return {"type": ["integer", "null"] if null else "integer", "minimum": lo}


# base.py Units (StrEnum: auto() gives the lower-case name)
UNITS = ["count", "pixels", "percent", "fraction", "ratio", "ms", "s", "bytes", "MB", "GB", "TB", "MiB", "GiB",
         "TiB", "Mbit/s", "Gbit/s", "Tbit/s", "GiB/s", "MB/s", "GB/s", "TB/s", "ms/token", "s/token", "tokens/s",
         "queries/s", "images/s", "videos/s", "audios/s", "Watts"]
STATS = obj({"units": {"enum": UNITS}, "mean": NUM, "mode": NUM_OR_NULL,
             "stddev": {"type": ["number", "null"], "minimum": 0},
             **{k: NUM_OR_NULL for k in ("min", "p0p1", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99",
                                         "p99p9", "max")}}, ["units", "mean"], extra=True)


def units(*allowed) -> dict:
    """A Statistics field whose check_units validator allows only these units."""
    return opt({"allOf": [STATS, {"properties": {"units": {"enum": list(allowed)}}}]})


SEQ = obj({"distribution": {"enum": ["fixed", "gaussian", "uniform", "other"]},
           "value": {"type": ["number", "integer"], "minimum": 0}, "std_dev": {"type": ["number", "null"], "minimum": 0},
           "min": int_min(0), "max": int_min(1)}, ["distribution", "value"])
META = obj({"schema_version": STR, "label": STR, "cfg_id": STR, "description": STR_OR_NULL}, ["label", "cfg_id"])
NATIVE = obj({"args": {"type": ["object", "null"]}, "envars": {"type": ["object", "null"]}, "config": {}})
PARALLELISM = obj({"tp": int_min(0, False), "dp": int_min(0, False), "dp_local": int_min(0, False),
                   "workers": int_min(0, False), "ep": int_min(1, False), "pp": int_min(1, False)})
ENGINE = obj({"kind": {"const": "inference_engine"}, "tool": STR, "tool_version": STR,
              "role": {"enum": ["replica", "prefill", "decode"]}, "replicas": int_min(1, False),
              "model": obj({"name": STR}, ["name"]),
              "accelerator": obj({"model": STR, "count": int_min(0, False), "parallelism": PARALLELISM},
                                 ["model", "count", "parallelism"])},
             ["kind", "tool", "tool_version", "role", "replicas", "model", "accelerator"])
GENERIC = obj({"kind": {"const": "generic"}, "tool": STR, "tool_version": STR}, ["kind", "tool", "tool_version"],
              extra=True)
COMPONENT = obj({"metadata": META, "standardized": {"oneOf": [ENGINE, GENERIC]}, "native": NATIVE},
                ["metadata", "standardized", "native"])
LOAD = obj({"metadata": obj({"schema_version": STR, "cfg_id": STR_OR_NULL, "description": STR_OR_NULL}),
            "standardized": obj({"tool": STR, "tool_version": STR, "parallelism": int_min(1, False),
                                 "source": {"enum": ["random", "sampled", "unknown"]}, "stage": int_min(0, False),
                                 "input_seq_len": SEQ, "output_seq_len": opt(SEQ),
                                 "prefix": {"type": ["object", "null"]}, "multi_turn": {"type": ["object", "null"]},
                                 "rate_qps": {"type": ["number", "null"], "exclusiveMinimum": 0},
                                 # an int >= 1, or float('inf'), which JSON cannot carry
                                 "concurrency": int_min(1)},
                                ["tool", "tool_version", "source", "input_seq_len"]),
            "native": NATIVE}, ["metadata", "standardized", "native"])
TIMES, GEN = ("ms", "s"), ("ms/token", "s/token")
AGG = obj({
    "requests": opt(obj({"total": int_min(0, False), "failures": int_min(0), "incomplete": int_min(0),
                         "input_length": units("count", "pixels"), "output_length": units("count", "pixels")},
                        ["total"])),
    "latency": opt(obj({"time_to_first_token": units(*TIMES), "normalized_time_per_output_token": units(*GEN),
                        "time_per_output_token": units(*GEN), "inter_token_latency": units(*GEN),
                        "request_latency": units(*TIMES)})),
    "throughput": opt(obj({"input_token_rate": units("tokens/s"), "output_token_rate": units("tokens/s"),
                           "total_token_rate": units("tokens/s"), "request_rate": units("queries/s")}))})
# pydantic's datetime from JSON: ISO 8601, the zone optional (a naive time is accepted)
DATETIME = {"type": ["string", "null"],
            "pattern": r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$"}
BR_V0_2 = obj({
    "version": STR,
    "run": obj({"uid": STR, "eid": STR_OR_NULL, "cid": STR_OR_NULL, "pid": STR_OR_NULL,
                "time": opt(obj({"start": DATETIME, "end": DATETIME, "duration": STR_OR_NULL})),
                "user": STR_OR_NULL, "description": STR_OR_NULL,
                "keywords": {"type": ["array", "null"], "items": STR}}, ["uid"]),
    "scenario": opt(obj({"stack": {"type": ["array", "null"], "items": COMPONENT}, "load": opt(LOAD)})),
    "results": obj({"request_performance": opt(obj({"aggregate": opt(AGG), "time_series": {"type": ["object", "null"]}})),
                    "session_performance": {"type": ["object", "null"]}, "observability": {"type": ["object", "null"]},
                    "profiling": {}, "component_health": {"type": ["array", "null"]}})},
    ["run", "results"])
VALIDATOR = jsonschema.Draft202012Validator(BR_V0_2)


def test_one_valid_file_per_merged_cell(tmp_path):
    raw = plan_raw()
    d = campaign(tmp_path / "results", raw, seed=1)
    out = report_plan(parse_plan(raw, "plans/demo.yml"), "plans/demo.yml", tmp_path / "results", quiet=True)
    files = sorted((d / EXPORT_DIR).glob("*.json"))
    merged = json.loads((d / "merged.json").read_text())
    assert len(files) == len(merged) == 10 and out.paths["llm-d"] == d / EXPORT_DIR
    for f in files:
        VALIDATOR.validate(json.loads(f.read_text()))
    doc = json.loads((d / EXPORT_DIR / "eagle3__conc16__w2.json").read_text())
    row = next(r for r in merged if (r["config"], r["cell"], r["node"]) == ("eagle3", "conc16", "w2"))
    agg = doc["results"]["request_performance"]["aggregate"]
    assert agg["throughput"]["output_token_rate"]["mean"] == pytest.approx(row["output_tok_s"], rel=1e-12)
    assert agg["latency"]["time_per_output_token"] == {**agg["latency"]["time_per_output_token"], "units": "ms/token"}
    assert agg["requests"]["total"] == 3 * 16
    engine, sf = doc["scenario"]["stack"]
    assert engine["standardized"]["model"]["name"] == "Qwen/Qwen3-32B"
    assert json.loads(engine["native"]["args"]["--speculative-config"])["method"] == "eagle3"
    assert sf["standardized"]["gate"]["verdict"] == out.model.gate_verdict == "PASSED"
    assert sf["standardized"]["spec_decode"]["acceptance_length"] == pytest.approx(row["acceptance_length"], rel=1e-12)
    assert sf["standardized"]["speedup_vs_baseline"]["speedup"] == pytest.approx(row["speedup"], rel=1e-12)
    assert "node-equivalence gate PASSED" in sf["metadata"]["description"]


def test_the_translation_refuses_what_llmd_refuses():
    """The schema above can fail: an unknown field, a wrong unit, a missing required field, and the
    shapes of the older commit the export was first written against (metadata.kind, requests_rate,
    an inference engine without replicas)."""
    good = {"version": "0.2", "run": {"uid": "x"}, "results": {"request_performance": {"aggregate": {
        "latency": {"time_to_first_token": {"units": "ms", "mean": 1.0}}}}}}
    VALIDATOR.validate(good)
    engine = {"metadata": {"label": "w1/vanilla", "cfg_id": "c"}, "native": {},
              "standardized": {"kind": "inference_engine", "tool": "vllm", "tool_version": "0.26.0", "role": "replica",
                               "replicas": 1, "model": {"name": "m"},
                               "accelerator": {"model": "NVIDIA H200", "count": 1, "parallelism": {"tp": 1}}}}
    VALIDATOR.validate({**good, "scenario": {"stack": [engine]}})
    old_engine = {**engine, "metadata": {**engine["metadata"], "kind": "inference_engine"},
                  "standardized": {k: v for k, v in engine["standardized"].items() if k != "kind"}}
    no_replicas = {**engine, "standardized": {k: v for k, v in engine["standardized"].items() if k != "replicas"}}
    for bad in ({**good, "metadata": {}}, {"version": "0.2", "run": {"uid": "x"}}, {**good, "run": {}},
                {**good, "results": {"request_performance": {"aggregate": {"latency": {
                    "time_to_first_token": {"units": "tokens/s", "mean": 1.0}}}}}},
                {**good, "results": {"request_performance": {"aggregate": {"throughput": {
                    "requests_rate": {"units": "queries/s", "mean": 1.0}}}}}},
                {**good, "scenario": {"stack": [old_engine]}}, {**good, "scenario": {"stack": [no_replicas]}},
                {**good, "run": {"uid": "x", "time": {"start": "20261203-071305"}}}):
        try:
            VALIDATOR.validate(bad)
        except jsonschema.ValidationError:
            continue
        raise AssertionError(f"accepted {bad}")


def test_merged_json_validates_against_the_published_schema(tmp_path):
    from pathlib import Path
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "schemas" / "merged.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    raw = plan_raw(**{"benchmark.slo": {"tpot_ms": 50}})
    d = campaign(tmp_path / "results", raw, seed=2)
    report_plan(parse_plan(raw, "plans/demo.yml"), "plans/demo.yml", tmp_path / "results", quiet=True)
    rows = json.loads((d / "merged.json").read_text())
    jsonschema.validate(rows, schema)
    assert {r["schema_version"] for r in rows} == {schema["items"]["properties"]["schema_version"]["const"]}
    rows[0]["concurrency"] = "16"  # the schema can fail
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rows, schema)


def test_a_refused_merge_leaves_no_export(tmp_path):
    raw = plan_raw()
    d = campaign(tmp_path / "results", raw, seed=3)
    plan = parse_plan(raw, "plans/demo.yml")
    report_plan(plan, "plans/demo.yml", tmp_path / "results", quiet=True)
    first = {f: f.stat().st_mtime_ns for f in (d / EXPORT_DIR).glob("*.json")}
    report_plan(plan, "plans/demo.yml", tmp_path / "results", quiet=True)  # nothing new: files untouched
    assert {f: f.stat().st_mtime_ns for f in (d / EXPORT_DIR).glob("*.json")} == first
    for f in d.glob("w2/vanilla_*.json"):  # w2's baseline 20 % faster: the gate fails
        r = json.loads(f.read_text())
        r["output_throughput"] *= 1.2
        r["mean_tpot_ms"] /= 1.2  # the gate's metric (token-weighted TPOT, vLLM's mean without arrays)
        f.write_text(json.dumps(r))
    out = report_plan(plan, "plans/demo.yml", tmp_path / "results", quiet=True)
    assert not out.merged and list((d / EXPORT_DIR).glob("*.json")) == []


EXPORT_TWICE = """
import hashlib, sys
from pathlib import Path
sys.path[:0] = [sys.argv[2]]
import compare_builder as cb
from specfleet.plan import parse_plan
from specfleet.report.build import report_plan
root = Path(sys.argv[1])
raw = cb.plan_raw()
d = cb.campaign(root, raw, seed=1)
import json
for f in d.glob("w*/*.json"):  # the percentiles of --metric-percentiles 50,90,95,99 (a set of keys)
    r = json.loads(f.read_text())
    r.update({f"p{p}_{m}_ms": 1.0 + p for p in (50, 90, 95, 99) for m in ("ttft", "tpot", "itl", "e2el")})
    f.write_text(json.dumps(r))
report_plan(parse_plan(raw, "plans/demo.yml"), "plans/demo.yml", root, quiet=True)
print(hashlib.sha256(b"".join(f.read_bytes() for f in sorted((d / "report/llm-d-v0.2").glob("*.json")))).hexdigest())
"""


def test_the_export_is_the_same_in_every_process(tmp_path):
    """A collect that brings nothing new leaves the files as they were (fab collect's "nothing new"):
    their text does not depend on the process's hash seed."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    here = Path(__file__).resolve()
    got = {subprocess.run([sys.executable, "-c", EXPORT_TWICE, str(tmp_path / seed), str(here.parent)],
                          capture_output=True, text=True, check=True, cwd=here.parents[2],
                          env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3", "4")}
    assert len(got) == 1


H200 = Path(__file__).resolve().parents[2] / "docs" / "examples" / "h200-fleet"


def test_statistics_are_over_the_pooled_requests_and_times_are_the_measurements(tmp_path):
    """Issue 39: the export's p99 and stddev were means of per-run values (TTFT p99 87 ms where the
    requests pooled give 116 ms), time.start was the first run's end. On the real H200 campaign: every
    latency statistic is numpy's over the cell's requests pooled (vLLM's definitions), the times span
    the runs' measurement (vLLM's `date`, written at each run's end, minus its duration)."""
    import shutil
    from datetime import datetime, timedelta
    import numpy as np
    shutil.copytree(H200 / "h200-dummy8b", tmp_path / "h200-dummy8b")
    plan = parse_plan(load_yaml(ROOT / "plans" / "h200-dummy8b.yml"), "plans/h200-dummy8b.yml")
    report_plan(plan, "plans/h200-dummy8b.yml", tmp_path, quiet=True)
    d = tmp_path / "h200-dummy8b"
    for f in sorted((d / EXPORT_DIR).glob("*.json")):
        doc = json.loads(f.read_text())
        VALIDATOR.validate(doc)
        config, cell, node = f.stem.split("__")
        runs = [json.loads(r.read_text()) for r in sorted((d / node).glob(f"{config}_{cell}_r*.json"))]
        assert len(runs) == 5, f
        ttft = np.array([t * 1000 for r in runs for t in r["ttfts"]])
        itl = np.array([x * 1000 for r in runs for row in r["itls"] for x in row])
        e2el = np.array([(t + sum(g)) * 1000 for r in runs for t, g in zip(r["ttfts"], r["itls"])])
        tpot = np.array([sum(g) * 1000 / (o - 1) for r in runs for g, o in zip(r["itls"], r["output_lens"]) if o > 1])
        lat = doc["results"]["request_performance"]["aggregate"]["latency"]
        for field, vals in (("time_to_first_token", ttft), ("inter_token_latency", itl),
                            ("request_latency", e2el), ("time_per_output_token", tpot)):
            st = lat[field]
            assert st["mean"] == pytest.approx(vals.mean(), rel=1e-9), (f, field)
            assert st["stddev"] == pytest.approx(vals.std(), rel=1e-9) and st["p99"] == pytest.approx(
                np.percentile(vals, 99), rel=1e-9) and st["p50"] == pytest.approx(np.median(vals), rel=1e-9)
        # not the mean of the runs' own p99 (what was exported before)
        per_run = np.mean([r["p99_ttft_ms"] for r in runs])
        if abs(np.percentile(ttft, 99) - per_run) > 1e-6:
            assert lat["time_to_first_token"]["p99"] != pytest.approx(per_run, rel=1e-6)
        ends = [datetime.strptime(r["date"], "%Y%m%d-%H%M%S") for r in runs]
        starts = [e - timedelta(seconds=r["duration"]) for e, r in zip(ends, runs)]
        assert doc["run"]["time"]["start"] == min(starts).isoformat() and doc["run"]["time"]["end"] == max(ends).isoformat()
        engine = doc["scenario"]["stack"][0]["standardized"]
        assert engine["kind"] == "inference_engine" and engine["accelerator"]["count"] == 1 and engine["replicas"] == 1
        assert "pooled" in doc["scenario"]["load"]["metadata"]["description"]


def test_the_servers_gpus_and_the_measured_window_from_telemetry(tmp_path):
    """accelerator.count is the server's GPUs (the lane's GPU set its results name), not the node's; with
    telemetry on the monotonic clock the times are the requests' own window, in UTC."""
    raw = plan_raw()
    d = campaign(tmp_path / "results", raw, seed=4)
    for f in d.glob("w2/eagle3_conc16_r*.json"):
        r = json.loads(f.read_text())
        r.update(gpu_uuids="GPU-a,GPU-b", start_times=[500.0, 500.5], latencies=[2.0, 3.0])
        f.write_text(json.dumps(r))
        rows = [{"kind": "header"}] + [{"kind": "power", "t": 1.8e9 + x / 10, "mono": 490 + x / 10,
                                        "gpus": [{"index": 0, "power_w": 300}]} for x in range(200)]
        f.with_name(f.stem + ".telemetry.jsonl").write_text("\n".join(json.dumps(x) for x in rows) + "\n")
    report_plan(parse_plan(raw, "plans/demo.yml"), "plans/demo.yml", tmp_path / "results", quiet=True)
    doc = json.loads((d / EXPORT_DIR / "eagle3__conc16__w2.json").read_text())
    VALIDATOR.validate(doc)
    assert doc["scenario"]["stack"][0]["standardized"]["accelerator"]["count"] == 2
    from datetime import datetime, timezone
    at = lambda mono: datetime.fromtimestamp(1.8e9 - 490 + mono, tz=timezone.utc).isoformat()  # noqa: E731
    assert doc["run"]["time"] == {**doc["run"]["time"], "start": at(500.0), "end": at(503.5)}
    other = json.loads((d / EXPORT_DIR / "eagle3__conc16__w1.json").read_text()) if (
        d / EXPORT_DIR / "eagle3__conc16__w1.json").exists() else None
    assert other is None or other["scenario"]["stack"][0]["standardized"]["accelerator"]["count"] == 1
