"""`fab compare` end to end: the same short plan (tests/e2e/plans/collect-fast.yml) benchmarked twice
on the testbed's simulated engine under two campaign names, each collected; the rerun compared with
the first, then a copy of the rerun whose EAGLE-3 result files are made 15 % slower.

Single runs per cell on a shared machine: without a noise estimate the comparison is undecidable
(exit 16 with --fail-on regression); accepted with --single-run-threshold, the rerun is judged with a
10 % tolerance (the plain threshold of single runs), which the 15 % slowdown still clears. Both plans carry an SLO (a
10-minute end-to-end latency every request meets), so goodput and SLO attainment are compared too;
in the slower copy half of EAGLE-3's requests are made to miss it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from e2e_helpers import PROJECT, fab, inventory_of

pytestmark = pytest.mark.e2e

SOURCE = PROJECT / "tests" / "e2e" / "plans" / "collect-fast.yml"
SLO_E2EL_MS = 600_000


def plan_file(tmp_path: Path, campaign: str) -> Path:
    doc = yaml.safe_load(SOURCE.read_text())
    doc["campaign"] = campaign
    doc["benchmark"]["dataset_path"] = str(PROJECT / "datasets" / "sample" / "question.jsonl")
    doc["assertions"] = [{"config": "eagle3", "concurrency": 8, "metric": "speedup", "min": 1.0}]
    doc["benchmark"]["slo"] = {"e2el_ms": SLO_E2EL_MS}
    p = tmp_path / f"{campaign}.yml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def out(r) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout[-6000:]}\n--- stderr\n{r.stderr[-3000:]}"


def test_compare_a_rerun_and_a_slower_copy(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    inv = inventory_of(tb)
    r = fab("provision", inventory=inv, runs=tmp_path / "runs")
    assert r.returncode == 0, out(r)
    results = tmp_path / "results"
    for name in ("cmp-a", "cmp-b"):
        plan = plan_file(tmp_path, name)
        r = fab("bench", "--hosts", "w1,w2", "--plan", str(plan), inventory=inv, runs=tmp_path / "runs")
        assert r.returncode == 0, out(r)
        r = fab("collect", "--plan", str(plan), "--results", str(results), inventory=inv, runs=tmp_path / "runs")
        assert r.returncode == 0, out(r)
        assert json.loads((results / name / "plan.json").read_text())["plan"]["campaign"] == name

    a, b = results / "cmp-a", results / "cmp-b"
    r = fab("compare", "--baseline", str(a), "--candidate", str(b), "--fail-on", "regression",
            "--tolerance-pct", "10", "--out", str(tmp_path / "undecided"))
    assert r.returncode & 16 and "UNDECIDABLE: 1 RUN" in r.stdout, out(r)
    # the plain threshold, accepted, on throughput alone: a single run's TTFT on a shared machine moves
    # by more than 10 % (the false-alarm rate the output states is what accepting it means)
    r = fab("compare", "--baseline", str(a), "--candidate", str(b), "--fail-on", "regression",
            "--tolerance-pct", "10", "--single-run-threshold", "--metric", "output_throughput",
            "--out", str(tmp_path / "rerun"))
    assert r.returncode == 0 and "plain threshold on single runs" in r.stdout, out(r)
    page = (tmp_path / "rerun" / "compare.html").read_text()
    assert "SIMULATED ENGINE" in page and "<svg" in page
    cmp = json.loads((tmp_path / "rerun" / "compare.json").read_text())
    assert [d["field"] for d in cmp["plan_differences"]] == ["campaign"]
    assert len(cmp["cells"]) == 6 and all(c["verdict"] != "regression" for c in cmp["cells"])
    assert len(cmp["goodput"]) == 6 and not any(g["regressed"] for g in cmp["goodput"])
    assert all(g["base_attainment_pct"] == g["cand_attainment_pct"] == 100 for g in cmp["goodput"])

    slow = results / "cmp-slow"
    shutil.copytree(b, slow)
    for f in (f for f in slow.glob("*/eagle3_conc*.json") if not f.name.endswith(".record.json")):
        d = json.loads(f.read_text())
        d["output_throughput"] *= 0.85
        d["total_token_throughput"] *= 0.85
        late = len(d["latencies"]) // 2  # half the requests past the SLO's end-to-end latency
        d["latencies"] = [x + SLO_E2EL_MS / 1000 * (i < late) for i, x in enumerate(d["latencies"])]
        f.write_text(json.dumps(d))
    r = fab("compare", "--baseline", str(a), "--candidate", str(slow), "--fail-on", "regression",
            "--tolerance-pct", "10", "--single-run-threshold", "--metric", "output_throughput",
            "--out", str(tmp_path / "slow"))
    assert r.returncode == 64, out(r)
    assert "REGRESSION: eagle3 @ conc8" in r.stdout and "REGRESSION: eagle3 @ conc1" in r.stdout, out(r)
    assert "REGRESSION: eagle3 @ conc8 under the SLO" in r.stdout, out(r)
    gp = {g["cell"]: g for g in json.loads((tmp_path / "slow" / "compare.json").read_text())["goodput"]
          if g["config"] == "eagle3"}
    assert gp["conc8"]["cand_attainment_pct"] == 50 and gp["conc8"]["attainment_verdict"] == "regression"

    other = results / "cmp-other"
    shutil.copytree(b, other)
    snap = json.loads((other / "plan.json").read_text())
    snap["plan"]["model"]["name"] = "Qwen/Qwen3-8B"
    (other / "plan.json").write_text(json.dumps(snap))
    r = fab("compare", "--baseline", str(a), "--candidate", str(other), "--out", str(tmp_path / "other"))
    assert r.returncode == 1 and "different models" in r.stderr and "--force" in r.stderr, out(r)
