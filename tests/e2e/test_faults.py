"""Faults on the testbed: Ctrl-C, one host's broken state, a venv changed in place, a killed copy.

Each run is `fab` as a subprocess; what a host looks like is read from the host (nsenter), and
what was recorded from the event log, never from fab's output alone.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from e2e_helpers import FAB, PROJECT, derived_inventory, events, fab, host_sh, inventory_of
from specfleet.fleet import Fleet
from specfleet.inventory import load_inventory
from specfleet.step import HostStatus, Status

pytestmark = pytest.mark.e2e

FAST = PROJECT / "tests/e2e/plans/fast.yml"
WORK = "/var/lib/specfleet/campaigns"
VENV = "/opt/sf-faults-venv"  # this test's own venv, on the bastion and the workers
RELEASES = VENV + ".releases"


def out_of(p) -> str:
    return p.stdout[-4000:] + p.stderr[-2000:]


def last_record(runs: Path) -> dict:
    logs = sorted(runs.glob("*.jsonl"))
    return json.loads(logs[-1].read_text().splitlines()[-1])


def wait_for(cond, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while not (v := cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
    return v


def runner_alive(tb, host: str) -> bool:
    pid = host_sh(tb, host, f"sed -n 's/^pid=\\([0-9]*\\).*/\\1/p' {WORK}/.specfleet-runner.lock").stdout.strip()
    return bool(pid) and host_sh(tb, host, f"tr '\\0' ' ' < /proc/{pid}/cmdline | grep -q runner.py").returncode == 0


# ---------------------------------------------------------------- Ctrl-C during fab bench
def test_ctrl_c_during_bench_exits_130_and_the_runners_go_on(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    prov = fab("provision", inventory=inventory_of(tb), runs=tmp_path / "runs-provision")
    assert prov.returncode == 0, out_of(prov)
    env = {**os.environ, "COLUMNS": "200", "SPECFLEET_INVENTORY": str(inventory_of(tb)),
           "SPECFLEET_RUNS_DIR": str(tmp_path / "runs")}
    argv = [FAB, "bench", "--hosts", "w1,w2", "--plan", str(FAST), "--poll", "0.5"]
    p = subprocess.Popen(argv, cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: runner_alive(tb, "w1") and runner_alive(tb, "w2"), 120, "both runners to start")
        time.sleep(1.0)  # fab is following them now
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, out[-3000:] + err
    assert "Traceback" not in out + err
    assert "where each host stands" in out
    for w in ("w1", "w2"):
        assert f"{w}: 'start runner' changed: started runner pid" in out, out[-3000:]
    assert "the runners already started go on" in out
    assert f"fab bench --hosts w1,w2 --plan {FAST} --poll 0.5` again" in out and "fab status --plan" in out
    end = last_record(tmp_path / "runs")
    assert (end["event"], end["outcome"], end["exit_code"]) == ("run-end", "interrupted", 130)
    # the runners did go on without fab
    assert runner_alive(tb, "w1") and runner_alive(tb, "w2")
    stop = fab("stop", "--plan", str(FAST), inventory=inventory_of(tb), runs=tmp_path / "runs-stop")
    assert stop.returncode == 0, out_of(stop)


# ---------------------------------------------------------------- one host's error stays its own
def test_a_bad_var_or_broken_state_on_one_host_fails_it_alone(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)

    def no_venv_on_w2(doc):
        doc["hosts"]["w2"]["vars"]["venv_path"] = None
    inv = derived_inventory(tb, tmp_path, no_venv_on_w2)

    # fab bench: w2 lacks a var the commands need; w1 starts its runner all the same
    b = fab("bench", "--plan", str(FAST), "--no-wait", inventory=inv, runs=tmp_path / "runs-bench")
    assert b.returncode == 2, out_of(b)
    assert "Traceback" not in b.stdout + b.stderr and "RECAP bench" in b.stdout
    recs = [e for e in events(tmp_path / "runs-bench") if e.get("event") == "step"]
    failed = [(r["host"], r["message"]) for r in recs if r["status"] == "failed"]
    assert [h for h, _ in failed] == ["w2"], failed
    where, _, what = failed[0][1].partition(": host 'w2', field 'vars.venv_path': ")
    assert Path(where).resolve() == Path(inv).resolve(), failed  # one line: file, host, field
    assert what.startswith("inventory variable 'venv_path' is not set"), failed
    assert any(r["host"] == "w1" and r["step"] == "start runner" and r["status"] == "changed" for r in recs)
    # (not provisioned: w1's runner may already have given up; that it was started is what counts)
    assert host_sh(tb, "w1", f"test -s {WORK}/e2e-fast/w1/run.json").returncode == 0
    assert host_sh(tb, "w2", f"test -e {WORK}/e2e-fast/w2/run.json").returncode != 0

    # fab collect: the same missing var on w2 (fetch reads it once there is something to fetch) ...
    host_sh(tb, "w2", f"mkdir -p {WORK}/e2e-fast/w2 && echo '{{\"items\": []}}' > {WORK}/e2e-fast/w2/state.json")
    c = fab("collect", "--plan", str(FAST), "--results", str(tmp_path / "results"), inventory=inv,
            runs=tmp_path / "runs-collect")
    assert c.returncode in (2, 2 | 8, 2 | 8 | 16) and "Traceback" not in c.stdout + c.stderr, out_of(c)
    assert "RECAP collect" in c.stdout
    fetch = {e["host"]: e for e in events(tmp_path / "runs-collect") if e.get("step") == "fetch results"}
    assert fetch["w2"]["status"] == "failed" and "'venv_path' is not set" in fetch["w2"]["message"]
    assert fetch["w1"]["status"] in ("ok", "changed"), fetch["w1"]

    # ... and an OSError on the bastion while fetching w1's files (its result directory is a file)
    dest = tmp_path / "results2" / "e2e-fast"
    dest.mkdir(parents=True)
    (dest / "w1").write_text("not a directory\n")
    c2 = fab("collect", "--plan", str(FAST), "--results", str(tmp_path / "results2"),
             inventory=inventory_of(tb), runs=tmp_path / "runs-collect2")
    assert c2.returncode in (2, 2 | 8, 2 | 8 | 16) and "Traceback" not in c2.stdout + c2.stderr, out_of(c2)
    assert "RECAP collect" in c2.stdout
    recs = events(tmp_path / "runs-collect2")
    fetch = {e["host"]: e for e in recs if e.get("step") == "fetch results"}
    assert fetch["w1"]["status"] == "failed" and fetch["w1"]["message"].startswith("FileExistsError: ")
    assert fetch["w2"]["status"] in ("ok", "changed"), fetch["w2"]
    tracebacks = [e for e in recs if e.get("event") == "error"]
    assert [e["host"] for e in tracebacks] == ["w1"] and "Traceback" in tracebacks[0]["traceback"]

    # any exception in Fleet.each (a runner that cannot start) fails that host only
    hosts = list(load_inventory(inventory_of(tb)).hosts.values())
    fleet = Fleet(hosts)

    def start(hc):
        if hc.host.name == "w1":
            raise RuntimeError("could not start the runner: exec format error")
        return HostStatus(Status.CHANGED, "started")
    out = fleet.each("start runner", start)
    fleet.close()
    assert fleet.dropped == {"w1": Status.FAILED} and set(out.succeeded) == {"w2"} and set(out.failed) == {"w1"}
    # the HostStatus the work returned is what the fleet records (not sniffed from a tuple)
    assert (out["w2"].status, out["w2"].message) == (Status.CHANGED, "started")
    assert [r.message for r in fleet.results if r.host == "w1"] == \
        ["RuntimeError: could not start the runner: exec format error"]
    stop = fab("stop", "--plan", str(FAST), "--hosts", "w1", inventory=inventory_of(tb), runs=tmp_path / "runs-stop")
    assert stop.returncode == 0, out_of(stop)


# ---------------------------------------------------------------- the venv: new content, new release
def release_state(tb, host: str, release: str) -> str:
    """Every entry of a release with size, mtime and inode: any write into it changes this."""
    return host_sh(tb, host, f"cd {shlex.quote(release)} && find . -printf '%P %s %T@ %i\\n' | LC_ALL=C sort"
                             " | sha256sum").stdout


def live(tb, host: str) -> str:
    return host_sh(tb, host, f"readlink {VENV}").stdout.strip()


def bastion_rsyncs(parent: int) -> list[int]:
    """PIDs of rsync processes under `parent` that copy into this test's releases."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
            ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if argv[0].endswith(b"rsync") and ppid == parent and any(RELEASES.encode() in a for a in argv):
            out.append(int(d))
    return out


def read_bytes(pid: int) -> int:
    try:
        return int(next(ln.split()[1] for ln in Path(f"/proc/{pid}/io").read_text().splitlines()
                        if ln.startswith("rchar:")))
    except (OSError, StopIteration):
        return 0


def test_a_venv_changed_in_place_gets_a_new_release_and_a_killed_copy_leaves_the_live_one(
        testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    subprocess.run(["rm", "-rf", VENV], check=True)
    inv = derived_inventory(tb, tmp_path, lambda d: d["all"]["vars"].__setitem__("venv_path", VENV))
    try:
        # --check before the bastion has this venv: says what would happen, no traceback
        chk = fab("provision", "--check", "--only", "venv,venv-deploy", inventory=inv, runs=tmp_path / "r0")
        assert chk.returncode == 0 and "Traceback" not in chk.stdout + chk.stderr, out_of(chk)
        assert f"would build venv {VENV}" in chk.stdout and "once it is built" in chk.stdout

        first = fab("provision", "--only", "venv,venv-deploy", inventory=inv, runs=tmp_path / "r1")
        assert first.returncode == 0, out_of(first)
        r1 = live(tb, "w1")
        assert r1.startswith(RELEASES + "/"), r1
        before = release_state(tb, "w1", r1)

        # a change in place: same requirements, same build digest, new content
        init = next(Path(VENV).glob("lib/python3*/site-packages/vllm/__init__.py"))
        with open(init, "a") as f:
            f.write("CHANGED_IN_PLACE = True\n")
        second = fab("provision", "--only", "venv,venv-deploy", inventory=inv, runs=tmp_path / "r2")
        assert second.returncode == 0, out_of(second)
        assert f"venv {VENV} is up to date" in second.stdout  # the digest did not change
        r2 = live(tb, "w1")
        assert r2 != r1 and r2.split("/")[-1].split("-")[0] == r1.split("/")[-1].split("-")[0]
        assert release_state(tb, "w1", r1) == before, "the deploy wrote into the release that was live"
        assert host_sh(tb, "w1", f"{VENV}/bin/python -c 'import vllm; print(vllm.CHANGED_IN_PLACE)'"
                       ).stdout.strip() == "True"
        assert host_sh(tb, "w1", f"cat {RELEASES}/previous").stdout.strip() == r1

        # again nothing to do: the worker's own bytecode caches do not count as a change
        third = fab("provision", "--only", "venv,venv-deploy", inventory=inv, runs=tmp_path / "r3")
        assert third.returncode == 0, out_of(third)
        assert [e for e in events(tmp_path / "r3") if e.get("changed")] == []

        # a big file in place, and the copy killed half-way: the live venv stays as it was
        with open(Path(VENV) / "aaa-big.bin", "wb") as f:
            f.write(os.urandom(192 * 2**20))
        live_state = release_state(tb, "w1", r2)
        env = {**os.environ, "COLUMNS": "200", "SPECFLEET_INVENTORY": str(inv),
               "SPECFLEET_RUNS_DIR": str(tmp_path / "r4")}
        p = subprocess.Popen([FAB, "provision", "--only", "venv-deploy", "--hosts", "w1"], cwd=PROJECT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            pids = wait_for(lambda: [x for x in bastion_rsyncs(p.pid) if read_bytes(x) > 32 * 2**20] and
                            bastion_rsyncs(p.pid), 120, "rsync to be copying the big file", interval=0.002)
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert p.returncode == 2, out + err
        assert "rsync was killed by SIGKILL (signal 9) before it finished" in out and "Traceback" not in out + err
        assert "exit -9" not in out
        assert live(tb, "w1") == r2
        assert host_sh(tb, "w1", f"{VENV}/bin/python -c 'import vllm; print(vllm.CHANGED_IN_PLACE)'"
                       ).stdout.strip() == "True"
        assert release_state(tb, "w1", r2) == live_state, "the killed copy touched the live release"
        size = host_sh(tb, "w1", f"stat -c %s {RELEASES}/*/aaa-big.bin 2>/dev/null").stdout.split()
        assert str(192 * 2**20) not in size, "the copy was not cut short: the test proves nothing"

        # Ctrl-C in the terminal during the copy (SIGINT to fab and its rsync): exit 130, fab says
        # where w1 stands, and the live venv is still the one it was
        p = subprocess.Popen([FAB, "provision", "--only", "venv-deploy", "--hosts", "w1"], cwd=PROJECT,
                             env={**env, "SPECFLEET_RUNS_DIR": str(tmp_path / "r4b")}, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: [x for x in bastion_rsyncs(p.pid) if read_bytes(x) > 32 * 2**20], 120,
                     "rsync to be copying the big file again", interval=0.002)
            os.killpg(p.pid, signal.SIGINT)
            out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        assert p.returncode == 130, out + err
        # (rsync got the SIGINT too: if its thread records that before fab's main thread takes the
        # interrupt, w1's line is the rsync's failure instead; both say where w1 stands)
        assert f"w1: interrupted during 'rsync {VENV}/ -> {RELEASES}/" in out or \
            f"w1: 'rsync {VENV}/ -> {RELEASES}/" in out, out
        assert "`fab provision --only venv-deploy --hosts w1` again finishes the work" in out
        assert last_record(tmp_path / "r4b")["outcome"] == "interrupted"
        assert live(tb, "w1") == r2 and release_state(tb, "w1", r2) == live_state

        # the next provision finishes the copy and then switches
        last = fab("provision", "--only", "venv-deploy", inventory=inv, runs=tmp_path / "r5")
        assert last.returncode == 0, out_of(last)
        r3 = live(tb, "w1")
        assert r3 not in (r1, r2)
        assert host_sh(tb, "w1", f"stat -c %s {VENV}/aaa-big.bin").stdout.strip() == str(192 * 2**20)
        assert host_sh(tb, "w1", f"test -d {r1}").returncode != 0  # pruned: only current and previous stay
    finally:
        subprocess.run(["rm", "-rf", VENV], check=False)


# ---------------------------------------------------------------- a channel refused while following
def test_a_channel_refused_while_following_is_lost_for_that_poll_not_a_crash(testbed_factory):
    """fab bench's follow on a loaded host: sshd opens no channel for one read (paramiko's
    "Timeout opening channel." crashed the command, exit 70). Here sshd's MaxSessions is reached for
    real: the read is lost for that poll, said once, and the next poll reads the runner again."""
    from specfleet.campaign import remote
    from specfleet.campaign.follow import follow
    from specfleet.worker import layout
    tb = testbed_factory(workers=1)
    fleet = Fleet(list(load_inventory(inventory_of(tb)).hosts.values()))
    hc = fleet.connections["w1"]
    work = hc.run("mktemp -d").stdout.strip()
    state = {"status": "done", "runner_pid": 1, "items": [{"name": "vanilla", "status": "done", "error": None}]}
    d = layout.run_dir(work, "c", "w1")
    hc.run(f"mkdir -p {shlex.quote(d)} && cat > {shlex.quote(d)}/{layout.STATE}", stdin=json.dumps(state).encode())
    held = []
    while True:  # every session sshd allows on this connection (the testbed's MaxSessions), held open
        try:
            held.append(hc.transport.open_session(timeout=5))
        except Exception:
            break
    assert len(held) >= 10

    class Console:
        lines: list[str] = []

        def print(self, text, markup=True):
            self.lines.append(text)
    try:
        views = follow(fleet, lambda c: remote.view(c, work, "c"), lambda h: d, Console(), poll=0.1)
    finally:
        hc.run(f"rm -rf {shlex.quote(work)}")
        fleet.close()
    assert "connection lost" in Console.lines[0] and "no channel opened" in Console.lines[0], Console.lines
    assert "retrying" in Console.lines[0]
    assert views["w1"].state["status"] == "done" and Console.lines[1].startswith("w1: done | done 1"), Console.lines
    assert fleet.dropped == {}
