"""The report's follow-up plans (plans/followup-*.yml) end to end: `fab bench` + `fab collect` on a
2-worker testbed with the simulated engine.

Each plan runs as written (its configurations, sweeps and cells) with the sizes shrunk for the
testbed: a few prompts of the repository's sample dataset, short outputs, one repeat. What is
checked comes from the workers (run.json, server logs, result files) and the collected report:
every expanded configuration runs once, the baseline on every node, one server start serves all of
a configuration's bench cells, every planned cell is merged, and a category plan gets its
per-category table and heatmap, stamped SIMULATED. No number of the simulated engine is asserted.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from e2e_helpers import PROJECT, fab, host_sh, inventory_of

pytestmark = pytest.mark.e2e

SAMPLE = PROJECT / "datasets/sample/question.jsonl"
WORK = "/var/lib/specfleet/campaigns"
HOSTS = ("w1", "w2")
PLANS = ["followup-concurrency", "followup-eagle3-k", "followup-output-len", "followup-categories"]


def shrunk(name: str, tmp_path: Path) -> tuple[Path, dict]:
    """plans/<name>.yml made short: 4 prompts of the sample, short outputs, one run per cell."""
    doc = yaml.safe_load((PROJECT / "plans" / f"{name}.yml").read_text())
    b = doc["benchmark"]
    b.update(dataset_path=str(SAMPLE), num_prompts=4, output_len=32, repeat=1, num_warmups=0,
             min_prompts_per_concurrency=0, timeout_s=300)
    if "output_len" in (b.get("sweep") or {}):
        b["sweep"]["output_len"] = [16, 32, 64]   # still three cells, named out16/out32/out64
    doc["server"]["health_poll_s"] = 0.5
    out = tmp_path / f"{name}.yml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out, doc


def planned(plan: Path):
    from specfleet.plan import load_plan
    p = load_plan(plan)
    return p, [c.name for c in p.configurations], [c.name for c in p.benchmark.cells]


def worker_json(tb, host: str, path: str) -> dict:
    return json.loads(host_sh(tb, host, f"cat {shlex.quote(path)}").stdout)


def test_followup_plans_run_end_to_end_on_two_workers(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    inv = inventory_of(tb)
    r = fab("provision", inventory=inv, runs=tmp_path / "runs-provision")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    for name in PLANS:
        plan, doc = shrunk(name, tmp_path)
        p, configs, cells = planned(plan)
        r = fab("bench", "--hosts", ",".join(HOSTS), "--plan", str(plan), "--poll", "0.5", inventory=inv,
                runs=tmp_path / f"runs-{name}", timeout=600)
        assert r.returncode == 0, (name, r.stdout[-4000:] + r.stderr[-2000:])
        queues = {}
        for h in HOSTS:
            run_dir = f"{WORK}/{p.campaign}/{h}"
            spec = worker_json(tb, h, f"{run_dir}/run.json")
            queues[h] = [i["name"] for i in spec["items"]]
            for item in spec["items"]:
                # one queue item per server configuration, holding every bench cell of the plan
                assert [b.get("cell") or f"conc{b['concurrency']}" for b in item["bench"]] == cells, (name, item["name"])
                log = host_sh(tb, h, f"cat {shlex.quote(run_dir + '/' + item['name'] + '.server.log')}").stdout
                assert log.count("==== specfleet ") == 1, (name, h, item["name"], "one server start for all cells")
                files = host_sh(tb, h, f"ls {shlex.quote(run_dir)}").stdout.split()
                assert {f"{item['name']}_{c}.json" for c in cells} <= set(files), (name, h, files)
        assert all(q[0] == p.baseline for q in queues.values()), queues
        assert sorted(c for q in queues.values() for c in q[1:]) == sorted(set(configs) - {p.baseline}), queues

        results = tmp_path / f"results-{name}"
        # --force: 4 short requests per cell on a shared machine differ between nodes by more than the
        # gate's band (one wave of the simulated engine); the gate has its own tests (test_collect.py)
        r = fab("collect", "--plan", str(plan), "--results", str(results), "--force", inventory=inv,
                runs=tmp_path / f"runs-collect-{name}", timeout=600)
        said = [ln for ln in r.stdout.splitlines() if "error" in ln.lower() or "crash" in ln.lower()]
        assert r.returncode == 0, (name, said, r.stdout[-3000:] + r.stderr[-2000:])
        camp = results / p.campaign
        md = (camp / "report.md").read_text()
        n_cells = len(cells) * (len(configs) - 1 + len(HOSTS))  # the baseline's cells on both nodes
        assert f"Complete: all {n_cells} planned" in md, (name, md[-3000:])
        rows = json.loads((camp / "merged.json").read_text())
        assert sorted({r["cell"] for r in rows}) == sorted(cells), name
        for row in rows:  # each speedup pairs the same cell on the same node
            base = [b for b in rows if b["config"] == p.baseline and b["node"] == row["node"]
                    and b["cell"] == row["cell"]]
            assert len(base) == 1 and row["speedup"] == pytest.approx(row["output_tok_s"] / base[0]["output_tok_s"])
        if name == "followup-categories":
            assert "## Per Spec-Bench category" in md and "![Per Spec-Bench category heatmap 1]" in md
            svg = (camp / "category-heatmap-1.svg").read_text()
            assert "SIMULATED" in svg
            for row in rows:  # each category cell sent only that category's prompts
                res = json.loads((camp / row["node"] / f"{row['config']}_{row['cell']}.json").read_text())
                assert res["category"] == row["category"] and res["completed"] == 4
