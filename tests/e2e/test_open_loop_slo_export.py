"""Request-rate cells, goodput under an SLO, telemetry and the llm-d export end to end: a short plan (collect-fast.yml
with vanilla and EAGLE-3 at concurrency 8, closed loop and 4 requests/s, an SLO) benchmarked on the
testbed's simulated engine and collected. Expected values are read from the collected result files."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from e2e_helpers import PROJECT, fab, inventory_of

pytestmark = pytest.mark.e2e


def _br_schema() -> dict:
    spec = importlib.util.spec_from_file_location("br", PROJECT / "tests" / "report" / "test_export_llmd.py")
    mod = importlib.util.module_from_spec(spec)
    import sys
    sys.path.insert(0, str(PROJECT / "tests" / "report"))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(PROJECT / "tests" / "report"))
    return mod.BR_V0_2


def out(r) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout[-6000:]}\n--- stderr\n{r.stderr[-3000:]}"


def test_rate_cells_goodput_and_export(testbed_factory, tmp_path):
    doc = yaml.safe_load((PROJECT / "tests" / "e2e" / "plans" / "collect-fast.yml").read_text())
    doc["campaign"] = "open-loop"
    doc["configurations"] = [c for c in doc["configurations"] if c["name"] in ("vanilla", "eagle3")]
    doc["benchmark"].update(dataset_path=str(PROJECT / "datasets" / "sample" / "question.jsonl"),
                            concurrencies=[8], request_rates=["inf", 4], seed=5,
                            slo={"ttft_ms": 600000, "tpot_ms": 600000})
    # the node gate is not what this test checks (tests/e2e/test_collect.py and tests/report/test_gate.py do):
    # the rate cell's one ~2 s run per node differed by 20.3 % in a CI run at load (79f9628), which made the gate
    # INCONCLUSIVE and collect merge nothing. The gate now lets the closed-loop cell decide, but that is one short
    # run per node too: a wide band keeps this single-run gate a pass at any load
    doc["equivalence"]["tolerance_pct"] = 50.0
    plan = tmp_path / "plan.yml"
    plan.write_text(yaml.safe_dump(doc, sort_keys=False))
    tb = testbed_factory(workers=2)
    inv = inventory_of(tb)
    for task in (["provision"], ["bench", "--hosts", "w1,w2", "--plan", str(plan)],
                 ["collect", "--plan", str(plan), "--results", str(tmp_path / "results")]):
        r = fab(*task, inventory=inv, runs=tmp_path / "runs")
        assert r.returncode == 0, out(r)
    camp = tmp_path / "results" / "open-loop"
    files = {f.name: json.loads(f.read_text()) for f in camp.glob("w*/*_conc8*.json") if not f.name.endswith(".record.json")}
    rated = {n: d for n, d in files.items() if "-rate4" in n}
    assert rated and all(d["request_rate"] == 4 and d["burstiness"] == 1 and d["arrival_seed"] == "5"
                         for d in rated.values()), sorted(files)
    assert all(d["request_rate"] == "inf" for n, d in files.items() if n not in rated)
    # no client cap at a set rate (coordinated omission): vLLM records max_concurrency null
    assert all(d["max_concurrency"] is None for d in rated.values())
    assert all(d["max_concurrency"] == 8 for n, d in files.items() if n not in rated)
    rows = json.loads((camp / "merged.json").read_text())
    assert {r["cell"] for r in rows} == {"conc8", "conc8-rate4"}
    # the rate cell's speedup is per token: its output tok/s is the offered load
    assert all("open loop" in r["speedup_method"] for r in rows if r["cell"] == "conc8-rate4" and r["config"] == "eagle3")
    # every request meets a 10-minute SLO: goodput = completed / duration, from the arrays
    for r in rows:
        d = files[f"{r['config']}_{r['cell']}.json"] if f"{r['config']}_{r['cell']}.json" in files else None
        if d and r["node"] == d["node"]:
            assert r["goodput_req_s"] == pytest.approx(d["completed"] / d["duration"], rel=1e-9)
            assert r["meets_slo"] is True
            assert r["vllm_goodput_req_s"] == pytest.approx(r["goodput_req_s"], rel=1e-9)  # --goodput reached the bench
    assert "Goodput under the SLO" in (camp / "report.md").read_text()
    schema = _br_schema()
    exported = sorted((camp / "report" / "llm-d-v0.2").glob("*.json"))
    assert len(exported) == len(rows)
    for f in exported:
        br = json.loads(f.read_text())
        jsonschema.validate(br, schema)
        if "-rate4" in f.name:
            assert br["scenario"]["load"]["standardized"]["rate_qps"] == 4
        assert "SIMULATED ENGINE" in br["scenario"]["stack"][1]["metadata"]["description"]
    # telemetry: every run's samples were fetched; the stand-in's GPU holds the server: 300 W (simulated)
    for name in files:
        tel = [json.loads(x) for x in next(camp.glob(f"w*/{name[:-5]}.telemetry.jsonl")).read_text().splitlines()]
        samples = [t for t in tel if t["kind"] == "sample"]
        assert tel[0]["kind"] == "header" and tel[0]["problems"] == [] and samples, name
        assert any(g.get("power_w") == 300 for t in samples for g in t.get("gpus", [])), name
        assert any("running" in t.get("server", {}) for t in samples), name
    md = (camp / "report.md").read_text()
    assert "## Telemetry per run" in md and (camp / "telemetry-timeline.svg").is_file()
    # report.html carries the timeline inline (offline), stamped: the stand-in made it
    page = (camp / "report.html").read_text()
    fig = page[page.index('id="figure-telemetry-timeline.svg"'):]
    assert fig.index("<svg") < fig.index("</svg>") and "SIMULATED ENGINE" in fig[:fig.index("</svg>")]
