"""2 nodes x 4 GPUs on the testbed's real Slurm cluster, with a TP=2 configuration (issue 25).

Every node's GPUs come from the allocation: the split plans the `gpu` GRES Slurm reports per node
(sinfo), the job asks `--gpus-per-node=4`, and on the node each server's CUDA_VISIBLE_DEVICES is a
subset of the GPUs the job step got (the step's CUDA_VISIBLE_DEVICES, as slurmd sets it). What a node
ran is read from the files the job wrote on the shared path, never from fab's output alone.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from e2e_helpers import fab, inventory_of
from test_slurm_fleet import HOSTS, derived_plan, needs_slurm, out, provision_over_ssh, slurm_job  # noqa: F401

pytestmark = pytest.mark.e2e

MODULE_TESTBED = {"workers": 2, "gpus": 4, "scheduler": "slurm"}
CAMPAIGN = "slurm-tp2"


def tp2_plan(tmp_path: Path) -> Path:
    """collect-fast, GPUs shared between configurations, plus one configuration over 2 GPUs (TP=2)."""
    path = derived_plan(tmp_path, CAMPAIGN, 64)
    doc = yaml.safe_load(path.read_text())
    doc["packing"] = "shared"
    doc["configurations"].append({"name": "tp2", "speculative_config": None,
                                  "extra_args": ["--tensor-parallel-size", "2"]})
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_two_nodes_of_four_gpus_run_a_tp2_configuration_on_gpus_of_the_allocation(module_bed, tmp_path):
    tb = module_bed
    inv = inventory_of(tb)
    sched = yaml.safe_load(inv.read_text())["scheduler"]
    provision_over_ssh(tb, tmp_path)
    plan = tp2_plan(tmp_path)
    r = fab("bench", "--results", str(tmp_path / "results"), "--plan", str(plan), inventory=inv, runs=tmp_path / "runs-bench")
    assert r.returncode == 0, out(r)
    shared = Path(sched["shared_dir"]) / CAMPAIGN
    rec = json.loads((shared / "slurm" / "jobs.json").read_text())[-1]
    assert rec["gpus_per_node"] == 4  # the nodes' gpu GRES, as sinfo reports it
    job = slurm_job(sched, rec["job_id"])
    assert "COMPLETED" in str(job["job_state"]), job["job_state"]
    ran = []  # (configuration, node, GPUs it ran on)
    for h in HOSTS:
        rdir = shared / h / CAMPAIGN / h
        eff = json.loads((rdir / "run.slurm.json").read_text())
        allocated = [int(g) for g in eff["slurm"]["cuda_visible_devices"].split(",")]
        assert len(allocated) == 4 and [g["index"] for g in eff["gpus"]] == allocated
        node = json.loads((shared / "slurm" / "nodes" / f"{h}.json").read_text())
        assert node["gpus"] == allocated and node["job_id"] == rec["job_id"]
        state = json.loads((rdir / "state.json").read_text())
        assert state["status"] == "done", state
        for item in state["items"]:
            assert item["status"] == "done" and {g["index"] for g in item["gpus"]} <= set(allocated), item
            ran.append((item["name"], h, len(item["gpus"])))
    assert {h for n, h, _ in ran if n == "vanilla"} == set(HOSTS)  # each node its own baseline
    assert sorted(n for n, _, _ in ran if n != "vanilla") == ["eagle3", "ngram", "tp2"], ran
    host = next(h for n, h, k in ran if n == "tp2")
    assert [k for n, _, k in ran if n == "tp2"] == [2], ran  # the TP=2 server on two GPUs of the allocation

    results = tmp_path / "results"
    r = fab("collect", "--plan", str(plan), "--results", str(results), inventory=inv, runs=tmp_path / "runs-collect")
    assert r.returncode == 0, out(r)
    tp = json.loads(next(f for f in (results / CAMPAIGN / host).glob("tp2_conc1*.json") if not f.name.endswith(".record.json")).read_text())
    assert len(tp["gpu_uuids"].split(",")) == 2
