"""What `fab bench` writes on the shared path under Slurm (dispatch.place): one specs.json for every
node, no folder or file per node (each node's step makes its own run folder), and a node that already
ran the same queue keeps its run id (the runner resumes its done cells)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from specfleet.campaign.schedule.split import NodeInfo, split
from specfleet.inventory import Host
from specfleet.plan import load_plan
from specfleet.scheduler import SlurmScheduler
from specfleet.slurm.dispatch import place
from specfleet.slurm.script import node_work_dir
from specfleet.worker import layout

PLAN = Path(__file__).resolve().parents[2] / "plans" / "demo.yml"


def test_place_writes_one_specs_file_and_keeps_the_run_id_a_node_ran(tmp_path):
    plan = load_plan(PLAN)
    cfg = SlurmScheduler(kind="slurm", partition="gpu", time_limit="10", shared_dir=str(tmp_path))
    nodes = [NodeInfo(n, gpus=({"index": 0}, {"index": 1}), gpus_source="slurm") for n in ("w1", "w2")]
    hosts = [Host(n.name, n.name, "root", 22, None, "/dev/null", False, 5, 600, ("workers",),
                  {"venv_path": "/shared/venv"}) for n in nodes]
    queues = split(plan, nodes)
    job, specs = place(cfg, plan, hosts, queues, nodes)
    d = tmp_path / plan.campaign
    assert sorted(os.listdir(d)) == ["slurm"]            # no folder per node: their steps make them
    placed = json.loads((d / "slurm" / "specs.json").read_text())
    assert set(placed) == {"w1", "w2"} and job.nodes == ("w1", "w2")
    for h in ("w1", "w2"):
        assert placed[h]["run_spec"] == specs[h].to_json()
        assert specs[h].items[0].name == plan.baseline
        assert specs[h].work_dir == node_work_dir(cfg, plan.campaign, h)
        assert "nvidia-smi" in placed[h]["provenance_probe"]

    # w1's step ran this queue (its run.json): placed again, w1 keeps that run id, w2 gets a new one
    rdir = Path(layout.run_dir(node_work_dir(cfg, plan.campaign, "w1"), plan.campaign, "w1"))
    rdir.mkdir(parents=True)
    (rdir / layout.RUN_SPEC).write_text(json.dumps({**specs["w1"].to_json(), "run_id": "ran-before"}))
    _, again = place(cfg, plan, hosts, queues, nodes)
    assert again["w1"].run_id == "ran-before" and again["w2"].run_id != "ran-before"
