"""Campaigns on the testbed's real Slurm cluster (munged, slurmctld, one slurmd per worker; testbed/slurm.py).

`fab bench` submits the campaign as one Slurm job (no SSH to the workers); `fab collect` reads the
results on the shared path. What a node ran is read from the files the job wrote (the effective run
spec carries the job id and the allocation) and from Slurm itself (squeue --json), never from
fab's output alone.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
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


# one Slurm testbed for the module (tests/e2e/conftest.py `module_bed`): each test uses its own
# campaign name, and a test that holds or cancels jobs ends them before it returns
MODULE_TESTBED = {"workers": 2, "scheduler": "slurm"}


@pytest.fixture(scope="module")
def slurm_bed(module_bed, tmp_path_factory):
    """(testbed, inventory, its scheduler block), the nodes provisioned once over SSH: the venv, mounts
    and env file, what a site's image holds already."""
    tb = module_bed
    inv = inventory_of(tb)
    provision_over_ssh(tb, tmp_path_factory.mktemp("provision"))
    return tb, inv, yaml.safe_load(inv.read_text())["scheduler"]


def provision_over_ssh(tb, tmp_path: Path) -> None:
    """The site's image, made over SSH (an inventory without the scheduler block): under Slurm fab
    provision only checks."""
    plain = derived_inventory(tb, tmp_path, lambda d: d.pop("scheduler"))
    r = fab("provision", inventory=plain, runs=tmp_path / "runs")
    assert r.returncode == 0, out(r)


@pytest.fixture(scope="module", autouse=True)
def needs_slurm():
    if subprocess.run(["which", "slurmctld", "sbatch"], capture_output=True).returncode != 0:
        pytest.skip("Slurm is not installed (scripts/setup.sh installs slurmctld slurmd slurm-client munge)")


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
    shared = Path(sched["shared_dir"]) / CAMPAIGN
    r = fab("bench", "--results", str(tmp_path / "results"), "--plan", PLAN, inventory=inv, runs=tmp_path / "runs-bench")
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
    # the placed queues, written before the job was submitted (as over SSH): what each node then ran
    planned = json.loads((results / CAMPAIGN / "planned.json").read_text())
    assert planned["placed"] == queues, planned

    r = fab("collect", "--plan", PLAN, "--results", str(results), inventory=inv, runs=tmp_path / "runs-collect")
    assert r.returncode == 0, out(r)
    assert "come from the split over the inventory" not in r.stdout + r.stderr, out(r)  # read, not re-split
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


NONROOT_PLAN = "tests/e2e/plans/nonroot.yml"  # vanilla, n-gram, EAGLE-3 at concurrency 16 and 1


def test_a_campaign_as_the_ordinary_login_user_runs_as_that_users_job(slurm_bed, tmp_path):
    """The field report's setup under Slurm (issue 37): `fab` run by maymust (an ordinary user with
    passwordless sudo on the nodes, `Testbed.as_login`), not root. provision (its root probes through
    `sudo -n` on each node), bench on w1,w2 and collect of vanilla, n-gram and EAGLE-3 at c=16 and 1 end with
    exit 0 and every cell merged; the job is maymust's and so is everything it wrote."""
    tb, inv, sched = slurm_bed
    uid = tb.state()["login_uid"]
    home = Path(tempfile.mkdtemp(prefix="sf-login-", dir=tb.disk_dir))  # the login user's, seen by it
    os.chown(home, uid, uid)
    mine = home / "inventory.yml"
    mine.write_text(inv.read_text())
    results, env = home / "results", {"HOME": str(home), "TMPDIR": str(home)}

    def as_login(*args, runs):
        r = fab(*args, inventory=mine, runs=home / runs, env=env, prefix=tb.as_login, timeout=900)
        assert r.returncode == 0, out(r)
        return r
    as_login("provision", runs="r-provision")
    as_login("bench", "--hosts", "w1,w2", "--plan", NONROOT_PLAN, "--results", str(results), runs="r-bench")
    shared = Path(sched["shared_dir"]) / "nonroot"
    job_id = json.loads((shared / "slurm" / "jobs.json").read_text())[-1]["job_id"]
    job = slurm_job(sched, job_id)
    assert job["user_id"] == uid and "COMPLETED" in str(job["job_state"]), (job["user_id"], job["job_state"])
    for h in HOSTS:
        rdir = shared / h / "nonroot" / h
        assert {p.stat().st_uid for p in [rdir, *rdir.iterdir()]} == {uid}, sorted(p.name for p in rdir.iterdir())
    as_login("collect", "--plan", NONROOT_PLAN, "--results", str(results), runs="r-collect")
    rows = json.loads((results / "nonroot" / "merged.json").read_text())
    assert {(x["config"], x["concurrency"]) for x in rows} == {(c, n) for c in ("vanilla", "ngram", "eagle3")
                                                               for n in (1, 16)}
    r = as_login("status", "--plan", NONROOT_PLAN, runs="r-status")
    assert f"Slurm job {job_id}: COMPLETED" in r.stdout, out(r)


def test_bad_partition_node_and_unshared_path_are_one_line_each(slurm_bed, tmp_path):
    tb, inv, sched = slurm_bed
    not_shared = tempfile.mkdtemp(prefix="sf-not-shared-", dir="/tmp")
    cases = [
        (lambda d: d["scheduler"].update(partition="nosuch"), "field 'scheduler.partition': Slurm has no partition"),
        (lambda d: d["hosts"].update(w9={"address": "10.10.30.99"}) or d["groups"]["workers"]["hosts"].append("w9"),
         "host 'w9': no Slurm node of that name"),
        # each worker's /tmp is its own tmpfs: the bastion's /tmp is not what the nodes see (tmp_path may be
        # under /var/tmp, which they do see: scripts/isolated's TMPDIR)
        (lambda d: d["scheduler"].update(shared_dir=not_shared), "is not shared: node(s) w1, w2"),
    ]
    for i, (edit, says) in enumerate(cases):
        (tmp_path / f"c{i}").mkdir()
        bad = derived_inventory(tb, tmp_path / f"c{i}", edit)
        r = fab("bench", "--results", str(tmp_path / "results"), "--plan", PLAN, "--no-wait", inventory=bad, runs=tmp_path / f"runs-{i}")
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.returncode == 1 and len(lines) == 1 and says in lines[0], out(r)
    shutil.rmtree(not_shared)


def test_an_account_is_checked_against_slurm_accounting_or_said_unchecked(slurm_bed, tmp_path):
    """The testbed has no slurmdbd (AccountingStorageType=accounting_storage/none): Slurm takes any account
    name, so an unknown one cannot be refused; fab bench says so in one line and goes on (nothing lost).
    With accounting, sacctmgr's answer or sbatch's refusal is the one error line (tests/slurm)."""
    tb, inv, sched = slurm_bed
    bad = derived_inventory(tb, tmp_path, lambda d: d["scheduler"].update(account="nosuch"))
    r = fab("bench", "--results", str(tmp_path / "results"), "--plan", PLAN, "--check", inventory=bad,
            runs=tmp_path / "runs")
    notes = [ln for ln in r.stdout.splitlines() if "scheduler.account" in ln]
    assert r.returncode == 0 and len(notes) == 1, out(r)
    assert f"{bad}: field 'scheduler.account' ('nosuch') is not checked: this cluster has no accounting" in notes[0]
    assert "sbatch --test-only accepted the job" in r.stdout, out(r)
    p = subprocess.run(["sacctmgr", "--parsable2", "--noheader", "show", "account", "nosuch"], capture_output=True,
                       text=True, env={"PATH": "/usr/bin:/bin", "SLURM_CONF": sched["slurm_conf"]}, timeout=60)
    assert p.returncode != 0  # what the note rests on: sacctmgr has no accounting to ask


def test_a_job_pending_past_the_deadline_is_cancelled_with_one_line(slurm_bed, tmp_path):
    tb, inv, sched = slurm_bed
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": sched["slurm_conf"]}
    hold = subprocess.run(["sbatch", "--parsable", "-N2", "--gpus-per-node=1", "-o", "/dev/null", "--wrap",
                           "sleep 120"], capture_output=True, text=True, env=env)
    assert hold.returncode == 0, hold.stderr
    try:
        fast = derived_inventory(tb, tmp_path, lambda d: d["scheduler"].update(pending_timeout_s=3))
        r = fab("bench", "--results", str(tmp_path / "results"), "--plan", PLAN, inventory=fast, runs=tmp_path / "runs")
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.returncode == 1 and len(lines) == 1, out(r)
        assert "still PENDING after 3 s" in lines[0] and "cancelled, nothing ran" in lines[0], out(r)
        job_id = json.loads((Path(sched["shared_dir"]) / CAMPAIGN / "slurm" / "jobs.json").read_text())[-1]["job_id"]
        job = slurm_job(sched, job_id)
        assert "CANCELLED" in str(job["job_state"])  # Slurm itself says so
    finally:
        subprocess.run(["scancel", hold.stdout.strip()], env=env)


def derived_plan(tmp_path: Path, campaign: str, output_len: int) -> Path:
    """collect-fast under another campaign name, its cells `output_len` tokens long."""
    src = Path(__file__).resolve().parents[2] / PLAN
    doc = yaml.safe_load(src.read_text())
    doc["campaign"] = campaign
    doc["benchmark"]["dataset_path"] = str((src.parent / doc["benchmark"]["dataset_path"]).resolve())
    doc["benchmark"]["output_len"] = output_len
    out_ = tmp_path / f"{campaign}.yml"
    out_.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out_


def item_phases(shared: Path, campaign: str) -> dict[str, list[str]]:
    """Each node's item statuses, in queue order, from its state.json on the shared path ({} until all exist)."""
    out_ = {}
    for h in HOSTS:
        try:
            st = json.loads((shared / h / campaign / h / "state.json").read_text())
        except (OSError, ValueError):
            return {}
        out_[h] = [i["status"] for i in st["items"]]
    return out_


def test_fab_stop_cancels_the_job_and_every_runner_stops_its_server(slurm_bed, tmp_path):
    tb, inv, sched = slurm_bed
    plan = derived_plan(tmp_path, "slurm-stop", 1024)
    r = fab("bench", "--results", str(tmp_path / "results"), "--plan", str(plan), "--no-wait", inventory=inv, runs=tmp_path / "runs-bench")
    assert r.returncode == 0, out(r)
    shared = Path(sched["shared_dir"]) / "slurm-stop"
    job_id = json.loads((shared / "slurm" / "jobs.json").read_text())[-1]["job_id"]

    def running() -> list:  # each node's item now loading or benchmarking
        return [next((p for p in ps if p not in ("pending", "done")), None)
                for ps in item_phases(shared, "slurm-stop").values()]
    deadline = time.monotonic() + 60
    while not (len(ph := running()) == len(HOSTS) and all(p in ("loading", "benchmarking") for p in ph)):
        assert time.monotonic() < deadline, running()
        time.sleep(0.3)
    r = fab("stop", "--plan", str(plan), inventory=inv, runs=tmp_path / "runs-stop")
    assert r.returncode == 0 and f"Slurm job {job_id}: CANCELLED" in r.stdout, out(r)
    for h in HOSTS:  # the runner's clean stop: state says so, the server is gone, its GPU memory freed
        st = json.loads((shared / h / "slurm-stop" / h / "state.json").read_text())
        assert st["status"] == "stopped", st
    assert all(v["gpu_memory_used_mib"] == 0 for v in tb.status()["hosts"].values())


def test_a_requeued_job_resumes_without_remeasuring_finished_cells(slurm_bed, tmp_path):
    """`scontrol requeue` while each node runs its second cell: Slurm stops the steps (SIGTERM: the
    runners stop their servers), holds the job for the testbed's cred_expire (testbed/slurm.py) and
    starts it again under the same id; each runner skips its finished baseline and redoes the cell it
    was in. collect then merges every planned cell."""
    tb, inv, sched = slurm_bed
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": sched["slurm_conf"]}
    campaign = "slurm-requeue"
    plan = derived_plan(tmp_path, campaign, 512)
    r = fab("bench", "--results", str(tmp_path / "results"), "--plan", str(plan), "--no-wait", inventory=inv, runs=tmp_path / "runs-bench")
    assert r.returncode == 0, out(r)
    shared = Path(sched["shared_dir"]) / campaign
    job_id = json.loads((shared / "slurm" / "jobs.json").read_text())[-1]["job_id"]

    def in_second_cell() -> bool:
        ph = item_phases(shared, campaign)
        return len(ph) == len(HOSTS) and all(p[0] == "done" and p[1] in ("loading", "benchmarking")
                                             for p in ph.values())
    deadline = time.monotonic() + 120  # the baselines take ~15 s per node here
    while not in_second_cell():
        assert time.monotonic() < deadline and "RUNNING" in str(slurm_job(sched, job_id)["job_state"]), \
            item_phases(shared, campaign)
        time.sleep(0.3)
    finished = {h: {f.name: (f.stat().st_mtime_ns, f.read_bytes()) for f in (shared / h / campaign / h).iterdir()
                    if f.name.startswith("vanilla")} for h in HOSTS}
    assert all("vanilla.done" in files for files in finished.values()), finished

    p = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    requeued_at = time.monotonic()
    deadline = requeued_at + 120  # cred_expire 10 s + KillWait; measured: see docs/slurm.md
    restarted = None
    while True:
        job = slurm_job(sched, job_id)
        nodes = [json.loads((shared / "slurm" / "nodes" / f"{h}.json").read_text()) for h in HOSTS]
        if restarted is None and all(n["restart_count"] == 1 for n in nodes):
            restarted = time.monotonic() - requeued_at
        if restarted is not None and not any(s in str(job["job_state"]) for s in ("RUNNING", "COMPLETING")):
            break
        assert time.monotonic() < deadline, (job["job_state"], item_phases(shared, campaign))
        time.sleep(0.5)
    print(f"requeued job {job_id} running again after {restarted:.1f} s")
    assert "COMPLETED" in str(job["job_state"]) and job["restart_cnt"] == 1, job["job_state"]

    for h in HOSTS:
        rdir = shared / h / campaign / h
        eff = json.loads((rdir / "run.slurm.json").read_text())
        assert eff["slurm"]["job_id"] == job_id and eff["slurm"]["restart_count"] == "1"
        state = json.loads((rdir / "state.json").read_text())
        assert state["status"] == "done" and all(i["status"] == "done" for i in state["items"]), state
        # the baseline was not measured again: its files are the ones written before the requeue
        assert {f: (rdir / f).stat().st_mtime_ns for f in finished[h]} == \
            {f: m for f, (m, _) in finished[h].items()}
        assert all((rdir / f).read_bytes() == b for f, (_, b) in finished[h].items())
        log = (rdir / "runner.log").read_text()
        assert "[vanilla] done marker present: skipped" in log, log[-2000:]

    results = tmp_path / "results"
    r = fab("collect", "--plan", str(plan), "--results", str(results), inventory=inv,
            runs=tmp_path / "runs-collect")
    assert r.returncode == 0, out(r)
    rows = json.loads((results / campaign / "merged.json").read_text())
    queues = {h: [i["name"] for i in json.loads((shared / h / campaign / h / "state.json").read_text())["items"]]
              for h in HOSTS}
    assert {(x["node"], x["config"], x["concurrency"]) for x in rows} == \
        {(h, c, conc) for h, q in queues.items() for c in q for conc in (8, 1)}


def test_a_failing_node_is_named_with_the_exclude_that_reruns_without_it(slurm_bed, tmp_path):
    """w2 loses its env file (what its check, the runner's preflight, reads first): its queue fails, the
    job fails, and `fab bench` names the Slurm node with the `--exclude` that re-runs the campaign
    without it; that command then runs every configuration on w1 alone."""
    tb, inv, sched = slurm_bed
    campaign = "slurm-exclude"
    plan = derived_plan(tmp_path, campaign, 64)
    env_file = yaml.safe_load(inv.read_text())["all"]["vars"]["env_file"]
    tb.exec("w2", f"mv {env_file} {env_file}.away", check=True)
    try:
        r = fab("bench", "--results", str(tmp_path / "results"), "--plan", str(plan), inventory=inv, runs=tmp_path / "runs-bench")
    finally:
        tb.exec("w2", f"mv {env_file}.away {env_file}", check=True)
    assert r.returncode == 2, out(r)
    job_id = json.loads((Path(sched["shared_dir"]) / campaign / "slurm" / "jobs.json").read_text())[-1]["job_id"]
    assert "FAILED" in str(slurm_job(sched, job_id)["job_state"])
    said = [ln for ln in r.stdout.splitlines() if ln.startswith(("node ", "re-run without"))]
    assert said[0].startswith(f"node w2 failed: runner failed, vanilla: env file {env_file} is missing"), out(r)
    hint = f"re-run without it: fab bench --plan {plan} --exclude w2"
    assert said == [said[0], hint], out(r)

    # the report on the bastion afterwards (docs/slurm.md: no dependent job): w2's cells are MISSING
    results = tmp_path / "results"
    r = fab("collect", "--plan", str(plan), "--results", str(results), inventory=inv, runs=tmp_path / "runs-collect")
    assert r.returncode & 16, out(r)
    said = " ".join(r.stdout.split())
    w2 = json.loads((Path(sched["shared_dir"]) / campaign / "w2" / campaign / "w2" / "state.json").read_text())
    for item in (i["name"] for i in w2["items"]):
        for conc in (8, 1):
            assert f"MISSING: {item} @ concurrency {conc} on w2" in said, out(r)
    assert f"Slurm job(s) of this campaign: {job_id}" in (results / campaign / "report.md").read_text()

    argv = shlex.split(hint.split(": ", 1)[1])[1:]  # the hint as a command, run as printed
    r = fab(*argv, "--results", str(results), inventory=inv, runs=tmp_path / "runs-rerun")
    assert r.returncode == 0, out(r)
    rec = json.loads((Path(sched["shared_dir"]) / campaign / "slurm" / "jobs.json").read_text())[-1]
    assert rec["nodes"] == ["w1"] and "COMPLETED" in str(slurm_job(sched, rec["job_id"])["job_state"])
    state = json.loads((Path(sched["shared_dir"]) / campaign / "w1" / campaign / "w1" / "state.json").read_text())
    assert [i["name"] for i in state["items"]] == ["vanilla", "ngram", "eagle3"]
    assert all(i["status"] == "done" for i in state["items"]), state


def test_provision_checks_every_node_in_a_job_and_bench_leaves_a_failing_one_out(slurm_bed, tmp_path):
    """Under Slurm `fab provision` changes nothing: the site roles' probes run as a job step on every node,
    the bastion decides in check mode. w2 without its GPU modules file fails, is named with the --exclude
    hint, is not repaired, and fab bench leaves it out until fab provision passes it again."""
    from specfleet.roles.nvidia import CONF
    tb, inv, sched = slurm_bed
    d = Path(sched["shared_dir"]) / "provision"
    r = fab("provision", inventory=inv, runs=tmp_path / "runs-1")
    assert r.returncode == 0 and "node w1: ok (site check passed)" in r.stdout and \
        "node w2: ok (site check passed)" in r.stdout, out(r)
    verdict = json.loads((d / "verdict.json").read_text())
    assert verdict["failed"] == {} and verdict["checked"] == list(HOSTS)
    assert "COMPLETED" in str(slurm_job(sched, verdict["job_id"])["job_state"])
    for h in HOSTS:  # each node's probes ran on that node, in that job
        got = json.loads((d / "out" / f"{h}.json").read_text())
        assert got["node"] == h and got["job_id"] == verdict["job_id"] and got["rc"] == 0, got

    tb.exec("w2", f"mv {CONF} {CONF}.away", check=True)
    try:
        r = fab("provision", inventory=inv, runs=tmp_path / "runs-2")
        still_absent = tb.exec("w2", f"test -e {CONF}").returncode != 0  # checked, not changed
    finally:
        tb.exec("w2", f"mv {CONF}.away {CONF}", check=True)
    assert r.returncode == 2 and still_absent, out(r)
    said = [ln for ln in r.stdout.splitlines() if ln.startswith("node ")]
    assert said[0] == "node w1: ok (site check passed)", out(r)
    assert said[1].startswith("node w2: FAILED the site check: ") and CONF in said[1], out(r)
    assert "fab bench --plan P --exclude w2" in r.stdout, out(r)
    assert set(json.loads((d / "verdict.json").read_text())["failed"]) == {"w2"}

    r = fab("bench", "--results", str(tmp_path / "results"), "--plan", PLAN, "--check", inventory=inv,
            runs=tmp_path / "runs-bench")
    assert r.returncode == 0 and "node w2 left out: it failed the site check of `fab provision`" in r.stdout, out(r)
    script = (Path(sched["shared_dir"]) / CAMPAIGN / "slurm" / "job.sbatch").read_text()
    assert "--nodelist=w1 " in script and "w2" not in script.split("--nodelist=")[1].split()[0], script

    r = fab("provision", inventory=inv, runs=tmp_path / "runs-3")  # fixed: passes again, nothing left out
    assert r.returncode == 0 and json.loads((d / "verdict.json").read_text())["failed"] == {}, out(r)


@pytest.mark.parametrize("state", ["drain", "down"])
def test_a_drained_or_down_node_is_named_with_its_state_and_the_exclude(module_bed, tmp_path, state):
    """A node the site drained or that is down: sbatch's refusal ("Requested node configuration is not
    available") was blamed on the inventory's `hosts` field. The node is named with its state and
    reason as sinfo's JSON gives them, with the `--exclude` that runs without it."""
    tb = module_bed
    inv = inventory_of(tb)
    sched = yaml.safe_load(inv.read_text())["scheduler"]
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": sched["slurm_conf"]}
    w2_idle(sched)  # a node resumed a moment ago is NOT_RESPONDING until slurmctld pings it (then a
    # DOWN set meanwhile is undone by ReturnToService=2)
    sc = subprocess.run(["scontrol", "update", "nodename=w2", f"state={state}", "reason=hostile sre"],
                        capture_output=True, text=True, env=env, timeout=30)
    assert sc.returncode == 0, sc.stderr
    try:
        r = fab("bench", "--results", str(tmp_path / "results"), "--plan", PLAN, "--check", inventory=inv,
                runs=tmp_path / "runs")
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.returncode == 1 and len(lines) == 1, out(r)
        assert "hosts (the node list)" not in lines[0], out(r)
        assert f"host 'w2': Slurm node w2 is {state.upper()} (sinfo: state " in lines[0], out(r)
        assert "reason: hostile sre)" in lines[0] and "state=resume" in lines[0], out(r)
        assert f"fab bench --plan {PLAN} --exclude w2" in lines[0], out(r)
    finally:
        subprocess.run(["scontrol", "update", "nodename=w2", "state=resume"], capture_output=True, env=env,
                       timeout=30)
        w2_idle(sched)


def w2_idle(sched: dict, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        w2 = next(n for n in slurm_json(sched, "sinfo", "--json")["nodes"] if n["name"] == "w2")
        if str(w2["state"]).lower() == "idle" and not w2.get("state_flags"):
            return
        time.sleep(0.5)
    raise AssertionError(f"Slurm node w2 not back to idle: {w2['state']} {w2.get('state_flags')}")
