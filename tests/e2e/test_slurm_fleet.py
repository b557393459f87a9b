"""Campaigns on the testbed's real Slurm cluster (munged, slurmctld, one slurmd per worker; testbed/slurm.py).

`fab bench` submits the campaign as one Slurm job (no SSH to the workers); `fab collect` reads the
results on the shared path. What a node ran is read from the files the job wrote (the effective run
spec carries the job id and the allocation) and from Slurm itself (squeue --json), never from
fab's output alone.
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from e2e_helpers import derived_inventory, fab, inventory_of

pytestmark = pytest.mark.e2e

PLAN = "tests/e2e/plans/collect-fast.yml"  # plans/demo.yml made short
CAMPAIGN = "collect-fast"
HOSTS = ("w1", "w2")


def out(r) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout[-6000:]}\n--- stderr\n{r.stderr[-3000:]}"


@pytest.fixture
def slurm_bed(testbed_factory):
    if subprocess.run(["which", "slurmctld", "sbatch"], capture_output=True).returncode != 0:
        pytest.skip("Slurm is not installed (scripts/setup.sh installs slurmctld slurmd slurm-client munge)")
    tb = testbed_factory(workers=2, scheduler="slurm")
    inv = inventory_of(tb)
    return tb, inv, yaml.safe_load(inv.read_text())["scheduler"]


def provision(inv, tmp_path) -> None:
    """The venv, mounts and env file on the nodes, over SSH: what a site's image holds already."""
    r = fab("provision", inventory=inv, runs=tmp_path / "runs-provision")
    assert r.returncode == 0, out(r)


def slurm_job(sched: dict, job_id: str) -> dict:
    """The job as Slurm reports it (22.05's squeue --json lists every job: pick ours)."""
    jobs = slurm_json(sched, "squeue", "--json", "--states=all", "--jobs", job_id)["jobs"]
    return next(j for j in jobs if str(j["job_id"]) == str(job_id))


def slurm_json(sched: dict, *argv: str) -> dict:
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=30,
                       env={"PATH": "/usr/bin:/bin", "SLURM_CONF": sched["slurm_conf"]})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_demo_plan_runs_as_a_slurm_job_and_collect_merges_every_cell(slurm_bed, tmp_path):
    tb, inv, sched = slurm_bed
    provision(inv, tmp_path)
    shared = Path(sched["shared_dir"]) / CAMPAIGN
    r = fab("bench", "--plan", PLAN, inventory=inv, runs=tmp_path / "runs-bench")
    assert r.returncode == 0, out(r)
    jobs = json.loads((shared / "slurm" / "jobs.json").read_text())
    job_id = jobs[-1]["job_id"]
    job = slurm_job(sched, job_id)
    assert "COMPLETED" in str(job["job_state"]), job["job_state"]
    queues = {}
    for h in HOSTS:  # each node ran its queue in the job, on the GPU Slurm gave it, baseline first
        rdir = shared / h / CAMPAIGN / h
        eff = json.loads((rdir / "run.slurm.json").read_text())
        assert eff["slurm"]["job_id"] == job_id and eff["slurm"]["node"] == h
        assert eff["slurm"]["cuda_visible_devices"] == "0"
        state = json.loads((rdir / "state.json").read_text())
        assert state["status"] == "done" and all(i["status"] == "done" for i in state["items"])
        queues[h] = [i["name"] for i in state["items"]]
        assert queues[h][0] == "vanilla"
    assert sorted(n for q in queues.values() for n in q[1:]) == ["eagle3", "ngram"]
    assert (shared / "slurm" / "job.sbatch").is_file()  # the script, kept beside the results

    results = tmp_path / "results"
    r = fab("collect", "--plan", PLAN, "--results", str(results), inventory=inv, runs=tmp_path / "runs-collect")
    assert r.returncode == 0, out(r)
    camp = results / CAMPAIGN
    rows = json.loads((camp / "merged.json").read_text())
    planned = {(h, c, conc) for h, q in queues.items() for c in q for conc in (8, 1)}
    assert {(x["node"], x["config"], x["concurrency"]) for x in rows} == planned
    assert f"Slurm job(s) of this campaign: {job_id}" in (camp / "report.md").read_text()
    for h in HOSTS:
        prov = json.loads((camp / h / "provenance.json").read_text())
        assert prov["slurm"]["job_id"] == job_id and job_id in prov["slurm"]["jobs"]
    r = fab("status", "--plan", PLAN, inventory=inv, runs=tmp_path / "runs-status")
    assert r.returncode == 0 and f"Slurm job {job_id}: COMPLETED" in r.stdout, out(r)


def test_bad_partition_node_and_unshared_path_are_one_line_each(slurm_bed, tmp_path):
    tb, inv, sched = slurm_bed
    cases = [
        (lambda d: d["scheduler"].update(partition="nosuch"), "field 'scheduler.partition': Slurm has no partition"),
        (lambda d: d["hosts"].update(w9={"address": "10.10.30.99"}) or d["groups"]["workers"]["hosts"].append("w9"),
         "host 'w9': no Slurm node of that name"),
        # each worker's /tmp is its own tmpfs: the bastion's tmp_path is not what the nodes see
        (lambda d: d["scheduler"].update(shared_dir=str(tmp_path / "not-shared")), "is not shared: node(s) w1, w2"),
    ]
    for i, (edit, says) in enumerate(cases):
        (tmp_path / f"c{i}").mkdir()
        bad = derived_inventory(tb, tmp_path / f"c{i}", edit)
        r = fab("bench", "--plan", PLAN, "--no-wait", inventory=bad, runs=tmp_path / f"runs-{i}")
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.returncode == 1 and len(lines) == 1 and says in lines[0], out(r)


def test_a_job_pending_past_the_deadline_is_cancelled_with_one_line(slurm_bed, tmp_path):
    tb, inv, sched = slurm_bed
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": sched["slurm_conf"]}
    hold = subprocess.run(["sbatch", "--parsable", "-N2", "--gpus-per-node=1", "-o", "/dev/null", "--wrap",
                           "sleep 120"], capture_output=True, text=True, env=env)
    assert hold.returncode == 0, hold.stderr
    try:
        fast = derived_inventory(tb, tmp_path, lambda d: d["scheduler"].update(pending_timeout_s=3))
        r = fab("bench", "--plan", PLAN, inventory=fast, runs=tmp_path / "runs")
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.returncode == 1 and len(lines) == 1, out(r)
        assert "still PENDING after 3 s" in lines[0] and "cancelled, nothing ran" in lines[0], out(r)
        job_id = json.loads((Path(sched["shared_dir"]) / CAMPAIGN / "slurm" / "jobs.json").read_text())[-1]["job_id"]
        job = slurm_job(sched, job_id)
        assert "CANCELLED" in str(job["job_state"])  # Slurm itself says so
    finally:
        subprocess.run(["scancel", hold.stdout.strip()], env=env)


def stop_plan(tmp_path: Path) -> Path:
    """collect-fast under another campaign name, long enough to be stopped while it runs."""
    src = Path(__file__).resolve().parents[2] / PLAN
    doc = yaml.safe_load(src.read_text())
    doc["campaign"] = "slurm-stop"
    doc["benchmark"]["dataset_path"] = str((src.parent / doc["benchmark"]["dataset_path"]).resolve())
    doc["benchmark"]["output_len"] = 1024
    out_ = tmp_path / "stop.yml"
    out_.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out_


def test_fab_stop_cancels_the_job_and_every_runner_stops_its_server(slurm_bed, tmp_path):
    tb, inv, sched = slurm_bed
    provision(inv, tmp_path)
    plan = stop_plan(tmp_path)
    r = fab("bench", "--plan", str(plan), "--no-wait", inventory=inv, runs=tmp_path / "runs-bench")
    assert r.returncode == 0, out(r)
    shared = Path(sched["shared_dir"]) / "slurm-stop"
    job_id = json.loads((shared / "slurm" / "jobs.json").read_text())[-1]["job_id"]

    def phases():
        out_ = []
        for h in HOSTS:
            try:
                st = json.loads((shared / h / "slurm-stop" / h / "state.json").read_text())
            except (OSError, ValueError):
                return []
            out_.append(next((i["status"] for i in st["items"] if i["status"] not in ("pending", "done")), None))
        return out_
    deadline = time.monotonic() + 60
    while not all(p in ("loading", "benchmarking") for p in phases()):
        assert time.monotonic() < deadline, phases()
        time.sleep(0.3)
    r = fab("stop", "--plan", str(plan), inventory=inv, runs=tmp_path / "runs-stop")
    assert r.returncode == 0 and f"Slurm job {job_id}: CANCELLED" in r.stdout, out(r)
    for h in HOSTS:  # the runner's clean stop: state says so, the server is gone, its GPU memory freed
        st = json.loads((shared / h / "slurm-stop" / h / "state.json").read_text())
        assert st["status"] == "stopped", st
    assert all(v["gpu_memory_used_mib"] == 0 for v in tb.status()["hosts"].values())
