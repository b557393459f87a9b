"""Privilege escalation only where a step needs it: a non-root login with passwordless sudo.

The worker's /etc is private to it, so the user and its sudoers file exist on
that worker only. The testbed's own login is such a user (`maymust`, docs/testbed.md): a whole
campaign runs as it, the runner too (issue 37).
"""
from __future__ import annotations

import json

import pytest
import yaml

from e2e_helpers import derived_inventory, events, fab, host_sh, inventory_of
from testbed import seed

pytestmark = pytest.mark.e2e

USER = "sfops"
NONROOT_PLAN = "tests/e2e/plans/nonroot.yml"  # vanilla, n-gram, EAGLE-3 at concurrency 16 and 1
WORK = "/var/lib/specfleet/campaigns"


def add_user(tb, host, sudo: bool):
    # home in the worker's private /tmp; the testbed's key authorizes the login
    script = (f"useradd -M -d /tmp/{USER} -s /bin/bash {USER} && usermod -p '*' {USER} && "
              f"install -d -o {USER} -m 700 /tmp/{USER} /tmp/{USER}/.ssh && "
              f"install -o {USER} -m 600 {tb.run_dir}/authorized_keys /tmp/{USER}/.ssh/authorized_keys")
    if sudo:
        script += f" && echo '{USER} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/{USER} && chmod 440 /etc/sudoers.d/{USER}"
    r = host_sh(tb, host, script)
    assert r.returncode == 0, r.stderr


def as_user(tb, tmp_path, become=True):
    def edit(doc):
        doc["all"]["user"] = USER
        doc["all"]["become"] = become
    return derived_inventory(tb, tmp_path, edit)


def test_root_steps_use_sudo_and_others_do_not(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    add_user(tb, "w1", sudo=True)
    add_user(tb, "w2", sudo=False)
    inv = as_user(tb, tmp_path)
    out = fab("provision", "--only", "nvidia,nfs,model", inventory=inv, runs=tmp_path / "r")
    # w1: sudo works, the root-owned file is written by root
    assert host_sh(tb, "w1", "stat -c %U /etc/modules-load.d/nvidia.conf").stdout.strip() == "root"
    # w2: no sudo for this user: it fails with a message saying what to configure, w1 is unaffected
    assert out.returncode == 2, out.stdout
    recs = [e for e in events(tmp_path / "r") if e.get("event") == "step"]
    w2 = [r for r in recs if r["host"] == "w2" and r["status"] in ("failed", "unreachable")]
    assert w2 and "sudo" in (w2[0]["message"] + w2[0]["stderr_tail"])
    bad = [(r["step"], r["message"]) for r in recs if r["host"] == "w1" and r["status"] not in ("ok", "changed")]
    assert bad == []
    # the read-only model check needed no root: it ran as the login user on w1
    assert any(r["host"] == "w1" and r["step"] == "model directory" and r["status"] == "ok" for r in recs)
    # fab bench on the worker where sudo would ask a password: the same one-line refusal, no runner started
    out = fab("bench", "--hosts", "w2", "--plan", NONROOT_PLAN, inventory=inv, runs=tmp_path / "rb")
    assert out.returncode == 2, out.stdout
    failed = [r for r in events(tmp_path / "rb") if r.get("event") == "step" and r["status"] == "failed"]
    assert failed and all(r["host"] == "w2" for r in failed)
    assert "NOPASSWD" in failed[0]["message"] and "\n" not in failed[0]["message"], failed[0]
    assert not any(r["step"] == "start runner" for r in failed)


def test_without_become_root_steps_fail_clearly(testbed_factory, tmp_path):
    tb = testbed_factory(workers=1)
    add_user(tb, "w1", sudo=True)
    out = fab("provision", "--only", "nvidia", inventory=as_user(tb, tmp_path, become=False),
              runs=tmp_path / "r")
    assert out.returncode == 2
    assert host_sh(tb, "w1", "test -e /etc/modules-load.d/nvidia.conf").returncode != 0
    assert "Permission denied" in out.stdout or "permission" in out.stdout.lower()



def said(r) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout[-6000:]}\n--- stderr\n{r.stderr[-3000:]}"


def test_a_campaign_as_the_testbeds_ordinary_login_with_passwordless_sudo(testbed_factory, tmp_path):
    """The field report's setup (issue 37): the testbed's default login is `maymust`, an ordinary user with
    NOPASSWD sudo. provision, bench on w1,w2 and collect end with exit 0 and every planned cell merged; the
    runner runs as maymust and what it writes is maymust's (made through sudo, the run folder was root's and
    the runner died unseen: `the runner exited at once: see .../runner.log`, a file that did not exist)."""
    tb = testbed_factory(workers=3)
    inv = inventory_of(tb)
    doc = yaml.safe_load(inv.read_text())
    assert (doc["all"]["user"], doc["all"]["become"]) == (seed.LOGIN, True) == ("maymust", True)
    assert host_sh(tb, "w1", "su -s /bin/sh maymust -c 'sudo -n id -u; id -u'").stdout.split()[0] == "0"
    results = tmp_path / "results"
    r = fab("provision", inventory=inv, runs=tmp_path / "r-provision")
    assert r.returncode == 0, said(r)
    r = fab("bench", "--hosts", "w1,w2", "--plan", NONROOT_PLAN, "--results", str(results),
            inventory=inv, runs=tmp_path / "r-bench")
    assert r.returncode == 0, said(r)
    for host in ("w1", "w2"):
        d = f"{WORK}/nonroot/{host}"
        owners = host_sh(tb, host, f"stat -c %U {WORK} {WORK}/nonroot {d} {WORK}/.specfleet-runner.lock; "
                                   f"find {d} ! -user maymust").stdout.split()
        assert owners == ["maymust"] * 4, owners  # and nothing in the run folder is another user's
        assert host_sh(tb, host, f"test -s {d}/runner.log && test -s {d}/state.json").returncode == 0
    r = fab("collect", "--plan", NONROOT_PLAN, "--results", str(results), inventory=inv, runs=tmp_path / "r-collect")
    assert r.returncode == 0, said(r)
    rows = json.loads((results / "nonroot" / "merged.json").read_text())
    cells = {(row["config"], row["concurrency"]) for row in rows}
    assert cells == {(c, n) for c in ("vanilla", "ngram", "eagle3") for n in (1, 16)}, said(r)
    # fab status says what is true: both finished, w3 (not in this bench) has no runner
    r = fab("status", "--plan", NONROOT_PLAN, inventory=inv, runs=tmp_path / "r-status")
    assert r.returncode == 0, said(r)
    assert "w3: no runner (this campaign was not placed here)" in r.stdout, said(r)
    assert "runner starting" not in r.stdout and "runner dead" not in r.stdout, said(r)
    # a second bench finds everything in place: the folders the user's already, nothing measured again
    r = fab("bench", "--hosts", "w1,w2", "--plan", NONROOT_PLAN, "--results", str(results),
            inventory=inv, runs=tmp_path / "r-bench2")
    assert r.returncode == 0, said(r)
    steps = [e for e in events(tmp_path / "r-bench2") if e.get("event") == "step"
             and e["step"].startswith("run folder ")]
    assert sorted((e["host"], e["status"]) for e in steps) == [("w1", "ok"), ("w2", "ok")], steps


def test_a_runner_that_cannot_start_says_why_and_status_says_it_is_dead(testbed_factory, tmp_path):
    """A failed start reads back the real reason in one line (the runner's log, or the shell's own error for a
    log it cannot write), and `fab status` says the runner is dead, not "starting" (issue 37)."""
    tb = testbed_factory(workers=1)

    def broken(doc):
        doc["all"]["vars"]["runner_python"] = "/opt/no-such-python3"
    inv = derived_inventory(tb, tmp_path, broken)
    assert fab("provision", inventory=inv, runs=tmp_path / "r-provision").returncode == 0
    r = fab("bench", "--hosts", "w1", "--plan", NONROOT_PLAN, inventory=inv, runs=tmp_path / "r-bench")
    assert r.returncode != 0
    fails = [e for e in events(tmp_path / "r-bench") if e.get("event") == "step" and e["status"] == "failed"]
    msg = next(e["message"] for e in fails if e["step"] == "start runner")
    assert msg.startswith("the runner exited at once: ") and "/opt/no-such-python3" in msg, msg
    assert "No such file or directory" in msg and "\n" not in msg, msg
    r = fab("status", "--plan", NONROOT_PLAN, inventory=inv, runs=tmp_path / "r-status")
    assert "w1: runner dead before its first state" in r.stdout and "no-such-python3" in r.stdout, said(r)
    # a log the login user cannot write: the shell's own words, before any runner starts
    host_sh(tb, "w1", f"rm -f {WORK}/nonroot/w1/runner.log && mkdir {WORK}/nonroot/w1/runner.log")
    r = fab("bench", "--hosts", "w1", "--plan", NONROOT_PLAN, inventory=inv, runs=tmp_path / "r-bench2")
    fails = [e for e in events(tmp_path / "r-bench2") if e.get("event") == "step" and e["status"] == "failed"]
    msg = next(e["message"] for e in fails if e["step"] == "start runner")
    assert msg.startswith("could not start the runner as maymust: ") and "Is a directory" in msg, msg


def test_fab_stop_of_another_users_runner_says_so_and_stops_nothing(testbed_factory, tmp_path):
    """A runner a root login started, stopped by maymust: kill is refused, and `fab stop` said "stopped runner"
    (the refusal read as "already gone") while the runner went on. Now it fails in one line; root stops it."""
    tb = testbed_factory(workers=1)
    inv = inventory_of(tb)
    as_root = derived_inventory(tb, tmp_path, lambda doc: doc["all"].update(user="root"))
    assert fab("provision", inventory=inv, runs=tmp_path / "r-provision").returncode == 0
    r = fab("bench", "--hosts", "w1", "--plan", NONROOT_PLAN, "--no-wait", inventory=as_root, runs=tmp_path / "r-b")
    assert r.returncode == 0, said(r)
    lock = f"{WORK}/.specfleet-runner.lock"
    pid = host_sh(tb, "w1", f"sed -n 's/^pid=\\([0-9]*\\).*/\\1/p' {lock}").stdout.strip()
    assert pid and host_sh(tb, "w1", f"stat -c %U /proc/{pid}").stdout.strip() == "root"
    r = fab("stop", "--plan", NONROOT_PLAN, inventory=inv, runs=tmp_path / "r-stop")
    assert r.returncode == 2, said(r)
    failed = [e for e in events(tmp_path / "r-stop") if e.get("event") == "step" and e["status"] == "failed"]
    assert [e["message"] for e in failed] == [f"runner pid {pid} is another user's, not maymust's (started by "
                                             "another login): stop it as that user"], said(r)
    assert host_sh(tb, "w1", f"test -d /proc/{pid}").returncode == 0  # still running
    r = fab("stop", "--plan", NONROOT_PLAN, inventory=as_root, runs=tmp_path / "r-stop-root")
    assert r.returncode == 0 and f"stopped runner pid {pid}" in r.stdout + "".join(
        e.get("message", "") for e in events(tmp_path / "r-stop-root")), said(r)
