"""Per-request acceptance end to end (issue 38): a short plan (collect-fast.yml, vanilla, n-gram and
EAGLE-3) with `benchmark.spec_decode_metrics: per_request` benchmarked on the testbed's simulated
engine, collected, reported: the speculative servers ran with --per-request-spec-decode-metrics, each
worker's untimed pass wrote one acceptance file per cell, collect fetched them, and report.md shows
the per-request distribution beside the runs' counters, with its histogram."""
from __future__ import annotations

import json
import statistics

import pytest
import yaml

from e2e_helpers import PROJECT, fab, inventory_of

pytestmark = pytest.mark.e2e


def out(r) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout[-6000:]}\n--- stderr\n{r.stderr[-3000:]}"


def test_per_request_acceptance_in_the_report(testbed_factory, tmp_path):
    doc = yaml.safe_load((PROJECT / "tests" / "e2e" / "plans" / "collect-fast.yml").read_text())
    doc["campaign"] = "acceptance"
    doc["benchmark"].update(dataset_path=str(PROJECT / "datasets" / "sample" / "question.jsonl"),
                            spec_decode_metrics="per_request")
    doc["equivalence"]["tolerance_pct"] = 50.0  # the node gate is not what this test checks (test_collect.py does)
    plan = tmp_path / "plan.yml"
    plan.write_text(yaml.safe_dump(doc, sort_keys=False))
    tb = testbed_factory(workers=2)
    inv = inventory_of(tb)
    for task in (["provision"], ["bench", "--hosts", "w1,w2", "--plan", str(plan)],
                 ["collect", "--plan", str(plan), "--results", str(tmp_path / "results")]):
        r = fab(*task, inventory=inv, runs=tmp_path / "runs")
        assert r.returncode == 0, out(r)
    camp = tmp_path / "results" / "acceptance"
    files = sorted(camp.glob("w*/*.acceptance.json"))
    by = {(f.parent.name, json.loads(f.read_text())["configuration"], json.loads(f.read_text())["cell"]): f
          for f in files}
    cfgs = {c for _, c, _ in by}
    assert cfgs == {"ngram", "eagle3"}, sorted(by)  # the vanilla server has no flag, no pass
    for (node, cfg, cell), f in by.items():
        d = json.loads(f.read_text())
        assert d["untimed"] is True and d["not_recorded"] is None and len(d["requests"]) == 16
        assert "--per-request-spec-decode-metrics" in (camp / node / f"{cfg}.server.log").read_text()
    md = (camp / "report.md").read_text()
    sec = md.split("## Acceptance per request", 1)[1].split("\n## ", 1)[0]
    merged = {(r["node"], r["config"], r["cell"]): r for r in json.loads((camp / "merged.json").read_text())}
    for (node, cfg, cell), f in by.items():
        reqs = [q for q in json.loads(f.read_text())["requests"] if q["num_spec_steps"]]
        lengths = [1 + q["num_accepted_draft_tokens"] / q["num_spec_steps"] for q in reqs]
        runs_length = merged[(node, cfg, cell)]["acceptance_length"]
        row = f"| {node} | {cfg} | {cell} | {runs_length:,.3f} |"
        assert row in sec, sec
        line = next(ln for ln in sec.splitlines() if ln.startswith(row))
        assert f"| 16 of 16 | {16 - len(reqs)} | {statistics.median(lengths):,.3f} [" in line, line
    assert "![Acceptance per request figure 1](acceptance-per-request.svg)" in sec
    assert (camp / "acceptance-per-request.svg").read_text().count("SIMULATED") >= 1
    assert "acceptance.json" not in md.split("## Notes", 1)[-1]  # no 'not named ... ignored' warning
