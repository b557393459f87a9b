"""The llm-d Benchmark Report v0.2 export: one file per merged cell, checked against the schema as
llm-d-benchmark defines it (benchmark_report/schema_v0_2.py and schema_v0_2_components.py at commit
08e0c227ecc1afe3f411f6c36fa2b1c9d71c8647), translated field by field to JSON Schema below: every
pydantic model there forbids extra fields, so every object here has additionalProperties false,
except the generic component's standardized section, which the schema leaves open."""
from __future__ import annotations

import json

import jsonschema
import pytest

from compare_builder import campaign, plan_raw
from specfleet.plan import parse_plan
from specfleet.report.render.export import EXPORT_DIR
from specfleet.report.build import report_plan

NUM = {"type": ["number", "integer"]}
STR = {"type": "string"}


def obj(props: dict, required=(), extra=False) -> dict:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": extra}


STATS = obj({k: NUM for k in ("mean", "mode", "stddev", "min", "p0p1", "p1", "p5", "p10", "p25", "p50", "p75",
                              "p90", "p95", "p99", "p99p9", "max")} | {"units": STR}, ["units", "mean"])


def units(*allowed) -> dict:
    return {"allOf": [STATS, {"properties": {"units": {"enum": list(allowed)}}}]}


SEQ = obj({"distribution": {"enum": ["fixed", "gaussian", "random", "other"]}, "value": {"type": "number", "minimum": 1},
           "std_dev": NUM, "min": {"type": "integer"}, "max": {"type": "integer"}}, ["distribution", "value"])
META = obj({"kind": STR, "schema_version": STR, "label": STR, "cfg_id": STR, "description": {"type": ["string", "null"]}},
           ["kind", "label", "cfg_id"])
NATIVE = obj({"args": {"type": ["object", "null"]}, "envars": {"type": ["object", "null"]}, "config": {}})
ENGINE = obj({"tool": STR, "tool_version": STR, "role": {"enum": ["replica", "prefill", "decode"]},
              "model": obj({"name": STR}, ["name"]),
              "accelerator": obj({"model": STR, "count": {"type": "integer", "minimum": 1},
                                  "parallelism": obj({k: {"type": "integer", "minimum": 1} for k in ("dp", "ep", "pp", "tp")})},
                                 ["model", "count", "parallelism"])},
             ["tool", "tool_version", "role", "model", "accelerator"])
GENERIC = obj({"tool": STR, "tool_version": STR}, ["tool", "tool_version"], extra=True)
COMPONENT = {"oneOf": [
    obj({"metadata": {"allOf": [META, {"properties": {"kind": {"const": "inference_engine"}}}]}, "standardized": ENGINE,
         "native": NATIVE}, ["metadata", "standardized", "native"]),
    obj({"metadata": {"allOf": [META, {"properties": {"kind": {"const": "generic"}}}]}, "standardized": GENERIC,
         "native": NATIVE}, ["metadata", "standardized", "native"])]}
LOAD = obj({"metadata": obj({"schema_version": STR, "cfg_id": STR, "description": STR}),
            "standardized": obj({"tool": STR, "tool_version": STR, "source": {"enum": ["random", "sampled"]},
                                 "stage": {"type": "integer"}, "input_seq_len": SEQ, "output_seq_len": SEQ,
                                 "prefix": {"type": "object"}, "multi_turn": {"type": "object"},
                                 "rate_qps": {"type": "number", "exclusiveMinimum": 0},
                                 "concurrency": {"type": "integer", "minimum": 1}},
                                ["tool", "tool_version", "source", "input_seq_len"]),
            "native": NATIVE}, ["metadata", "standardized", "native"])
TIMES = ("s", "ms")
AGG = obj({
    "requests": obj({"total": {"type": "integer", "minimum": 0}, "failures": {"type": "integer", "minimum": 0},
                     "incomplete": {"type": "integer"}, "input_length": units("count"), "output_length": units("count")},
                    ["total"]),
    "latency": obj({"time_to_first_token": units(*TIMES), "normalized_time_per_output_token": units("ms/token", "s/token"),
                    "time_per_output_token": units("ms/token", "s/token"), "inter_token_latency": units("ms/token", "s/token"),
                    "request_latency": units(*TIMES)}),
    "throughput": obj({"input_token_rate": units("tokens/s"), "output_token_rate": units("tokens/s"),
                       "total_token_rate": units("tokens/s"), "requests_rate": units("queries/s")})})
BR_V0_2 = obj({
    "version": {"const": "0.2"},
    "run": obj({"uid": STR, "eid": STR, "cid": STR, "user": STR,
                "time": obj({"start": {"type": "string", "format": "date-time"}, "end": STR, "duration": STR})}),
    "scenario": obj({"stack": {"type": "array", "items": COMPONENT}, "load": LOAD}),
    "results": obj({"request_performance": obj({"aggregate": AGG, "time_series": {"type": "object"}}),
                    "observability": {"type": "object"}, "profiling": {}})}, ["version", "run", "results"])


def test_one_valid_file_per_merged_cell(tmp_path):
    raw = plan_raw()
    d = campaign(tmp_path / "results", raw, seed=1)
    out = report_plan(parse_plan(raw, "plans/demo.yml"), "plans/demo.yml", tmp_path / "results", quiet=True)
    files = sorted((d / EXPORT_DIR).glob("*.json"))
    merged = json.loads((d / "merged.json").read_text())
    assert len(files) == len(merged) == 10 and out.paths["llm-d"] == d / EXPORT_DIR
    for f in files:
        jsonschema.validate(json.loads(f.read_text()), BR_V0_2)
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
    """The schema above can fail: an unknown field, a wrong unit, a missing required field."""
    good = {"version": "0.2", "run": {}, "results": {"request_performance": {"aggregate": {
        "latency": {"time_to_first_token": {"units": "ms", "mean": 1.0}}}}}}
    jsonschema.validate(good, BR_V0_2)
    for bad in ({**good, "metadata": {}}, {"version": "0.2", "run": {}},
                {**good, "results": {"request_performance": {"aggregate": {"latency": {
                    "time_to_first_token": {"units": "tokens/s", "mean": 1.0}}}}}}):
        try:
            jsonschema.validate(bad, BR_V0_2)
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
