"""User errors are one line and exit 1; a crash and a Ctrl-C are recorded as what they were.

`fab` runs as a subprocess, as people run it. No host is reached: the inventories point at
127.0.0.1 (a closed port, or a listener of this test that never answers), so nothing leaves
this machine. The testbed versions (bench, provision) are tests/e2e/test_faults.py.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml

from specfleet.fleet import Fleet
from specfleet.inventory import load_inventory
from specfleet.facts.files import PathKind
from specfleet.step import Change, Status, Step, StepFailed
from specfleet.yamlfile import YamlFileError, load_yaml

PROJECT = Path(__file__).resolve().parents[2]
FAB = str(Path(sys.executable).parent / "fab")


def fab(*args, tmp_path: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    e = {**os.environ, "COLUMNS": "200", "SPECFLEET_RUNS_DIR": str(tmp_path / "runs"), **(env or {})}
    return subprocess.run([FAB, *args], cwd=PROJECT, env=e, capture_output=True, text=True, timeout=timeout)


def last_record(tmp_path: Path) -> dict:
    logs = sorted((tmp_path / "runs").glob("*.jsonl"))
    assert len(logs) == 1, logs
    return json.loads(logs[0].read_text().splitlines()[-1])


def assert_one_line_error(p: subprocess.CompletedProcess, *needles: str) -> None:
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def inventory(tmp_path: Path, *, ports=(1,), bastion: dict | None = None, host_vars: dict | None = None) -> Path:
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    doc = {"all": {"user": "root", "known_hosts": str(kh), "connect_timeout": 30,
                   "vars": {"venv_path": str(tmp_path / "no-venv")}},
           "bastion": {"vars": bastion or {}},
           "hosts": {f"w{i + 1}": {"address": f"127.0.0.{i + 1}", "port": port, "vars": dict(host_vars or {})}
                     for i, port in enumerate(ports)}}
    p = tmp_path / "inventory.yml"
    p.write_text(yaml.safe_dump(doc))
    return p


# ---------------------------------------------------------------- one-line user errors
def test_a_binary_inventory_is_one_line(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_bytes(bytes(range(256)) * 4)
    assert_one_line_error(fab("facts", "--inventory", str(inv), tmp_path=tmp_path), str(inv), "not a text file")
    with pytest.raises(YamlFileError, match="not a text file"):
        load_yaml(inv)


def test_a_control_character_in_yaml_is_one_line(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_bytes(b"hosts:\n  w1: {address: 10.0.0.1}\x00\n")
    p = fab("facts", "--inventory", str(inv), tmp_path=tmp_path)
    assert_one_line_error(p, str(inv), "YAML syntax error")


def test_a_missing_plan_dataset_is_one_line_before_any_host(tmp_path):
    plan = yaml.safe_load((PROJECT / "tests/e2e/plans/fast.yml").read_text())
    plan["benchmark"]["dataset_path"] = str(tmp_path / "nowhere/question.jsonl")
    plan_path = tmp_path / "plan.yml"
    plan_path.write_text(yaml.safe_dump(plan))
    p = fab("bench", "--plan", str(plan_path), "--inventory", str(inventory(tmp_path)), tmp_path=tmp_path)
    assert_one_line_error(p, str(plan_path), "benchmark.dataset_path", "nowhere/question.jsonl",
                          "does not exist on the bastion", "{on_worker: /path}")


def test_a_missing_bastion_dataset_is_one_line(tmp_path):
    inv = inventory(tmp_path, bastion={"datasets": [str(tmp_path / "gone.jsonl")]})
    p = fab("provision", "--only", "configs", "--inventory", str(inv), tmp_path=tmp_path)
    assert_one_line_error(p, str(inv), "bastion, field 'datasets' (entry 1)", "gone.jsonl")


def test_a_missing_bastion_venv_is_one_line_and_recorded(tmp_path):
    inv = inventory(tmp_path, bastion={"base_python": sys.executable, "venv_requirements": ["x"]})
    p = fab("provision", "--only", "venv-deploy", "--inventory", str(inv), tmp_path=tmp_path)
    assert_one_line_error(p, "field 'venv_path'", str(tmp_path / "no-venv"), "fab provision --only venv")
    end = last_record(tmp_path)
    assert (end["event"], end["outcome"], end["exit_code"]) == ("run-end", "bad input", 1)


# ---------------------------------------------------------------- a crash is not a success
def test_a_crash_is_recorded_as_crashed_with_its_exception(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent("""
        import specfleet.fleet as f
        _play = f.Fleet.play
        def play(self, *a, **kw):
            _play(self, *a, **kw)
            raise RuntimeError("injected crash after the hosts ran")
        f.Fleet.play = play
    """))
    inv = inventory(tmp_path, ports=(1, 1))  # port 1 on localhost: refused at once
    p = fab("facts", "--inventory", str(inv), tmp_path=tmp_path, env={"PYTHONPATH": str(hook)})
    assert p.returncode == 70, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert "specfleet crashed" in p.stderr and "RuntimeError: injected crash" in p.stderr
    assert "RECAP facts" in p.stdout  # what the hosts did before the crash is still shown
    end = last_record(tmp_path)
    assert end["event"] == "run-end" and end["outcome"] == "crashed" and end["exit_code"] == 70
    assert end["error"] == {"type": "RuntimeError", "message": "injected crash after the hosts ran"}
    assert "Traceback" in end["traceback"] and "injected crash" in end["traceback"]


# ---------------------------------------------------------------- Ctrl-C
@pytest.fixture
def silent_listeners():
    """Two TCP listeners on 127.0.0.1 that accept and never say a word (an SSH server that hangs)."""
    socks, conns = [], []
    for i in range(2):
        s = socket.socket()
        s.bind((f"127.0.0.{i + 1}", 0))  # the addresses `inventory` gives w1 and w2
        s.listen()
        socks.append(s)

    def accept(s):
        try:
            while True:
                conns.append(s.accept()[0])
        except OSError:
            pass
    for s in socks:
        threading.Thread(target=accept, args=(s,), daemon=True).start()
    yield [s.getsockname()[1] for s in socks], conns
    for s in socks + conns:
        s.close()


@pytest.mark.parametrize("n", [1, 2], ids=["one host (main thread)", "two hosts (threads)"])
def test_ctrl_c_says_where_each_host_stands_and_exits_130(tmp_path, silent_listeners, n):
    ports, accepted = silent_listeners
    inv = inventory(tmp_path, ports=ports[:n])
    env = {**os.environ, "COLUMNS": "200", "SPECFLEET_RUNS_DIR": str(tmp_path / "runs")}
    p = subprocess.Popen([FAB, "facts", "--inventory", str(inv)], cwd=PROJECT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # a Ctrl-C during fab's start-up is not the path under test, and how long start-up takes depends on
        # the machine's load (~1 s idle; at load 14 on 2 cores the hosts had not begun 2 s after the event
        # log's run-start, in the CI run of fb98115): wait until every host's connection has reached its
        # silent listener, i.e. every host is gathering facts and waiting for a banner that never comes.
        # The bound (60 s) only ends a hung test
        deadline = time.monotonic() + 60
        while len(accepted) < n and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.poll() is None, p.communicate()
        assert len(accepted) == n, f"only {len(accepted)} of {n} hosts connected within 60 s"
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=20)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, out + err
    assert took < 10, f"fab took {took:.1f} s to stop after Ctrl-C"
    assert "Traceback" not in out + err
    assert "interrupted" in out and "where each host stands" in out
    for w in ["w1", "w2"][:n]:
        assert f"{w}: interrupted during 'gathering facts'" in out, out
    assert "again finishes the work" in out
    end = last_record(tmp_path)
    assert (end["event"], end["outcome"], end["exit_code"]) == ("run-end", "interrupted", 130)


# ---------------------------------------------------------------- one host's error stays its own
class LocalStep(Step):
    """Facts from the bastion (no SSH), and a decide that may raise what it is given."""

    def __init__(self, name, raises=None):
        self.name, self.raises = name, raises

    def decide(self, facts):
        if self.raises:
            raise self.raises
        return []


def hosts_of(tmp_path):
    return list(load_inventory(inventory(tmp_path, ports=(1, 1, 1))).hosts.values())


def test_any_exception_in_one_hosts_steps_fails_that_host_only(tmp_path):
    fleet = Fleet(hosts_of(tmp_path), forks=3)
    errors = {"w1": FileNotFoundError(2, "No such file or directory", "/opt/x"), "w2": KeyError("venv_path")}

    def steps_for(h):
        if h.name == "w3":
            raise RuntimeError("bad steps\nsecond line")
        return [LocalStep("first", errors.get(h.name)), LocalStep("second")]
    out = fleet.play(steps_for)
    fleet.close()
    assert fleet.dropped == {"w1": Status.FAILED, "w2": Status.FAILED, "w3": Status.FAILED}
    by = {(r.host, r.step): r for r in fleet.results}
    assert by[("w1", "first")].message == "FileNotFoundError: [Errno 2] No such file or directory: '/opt/x'"
    assert by[("w1", "second")].status is Status.SKIPPED
    assert by[("w2", "first")].message == "KeyError: 'venv_path'"
    assert by[("w3", "steps for this host")].message == "RuntimeError: bad steps second line"
    assert set(out) == {"w1", "w2", "w3"}


def test_play_returns_one_outcome_per_host_with_failed_and_succeeded_views(tmp_path):
    fleet = Fleet(hosts_of(tmp_path), forks=3)
    out = fleet.play(lambda h: [LocalStep("a", StepFailed(f"{h.name} is broken") if h.name == "w2" else None),
                                LocalStep("b")])
    fleet.close()
    assert set(out) == {"w1", "w2", "w3"}
    assert set(out.failed) == {"w2"} and set(out.succeeded) == {"w1", "w3"}
    w2 = out["w2"]
    assert w2.status is Status.FAILED and w2.failed and w2.message == "w2 is broken"
    assert [(r.step, r.status) for r in w2.results] == [("a", Status.FAILED), ("b", Status.SKIPPED)]
    assert out["w1"].status is Status.OK and [r.step for r in out["w1"].results] == ["a", "b"]
    # the outcomes hold the very results the fleet recorded, not copies
    assert all(any(r is x for x in fleet.results) for o in out.values() for r in o.results)


class Reads(Step):
    """A reading step with no host facts (no round trip): it answers the host's name."""

    def __init__(self, host):
        self.name, self.host = "read", host

    def read(self, facts):
        return f"read {self.host}"


def test_facts_returns_what_each_host_read_and_none_where_a_check_beside_it_failed(tmp_path):
    fleet = Fleet(hosts_of(tmp_path), forks=3)
    out = fleet.facts(lambda h: [Reads(h.name), LocalStep("check", StepFailed("no dataset") if h.name == "w2" else None)])
    fleet.close()
    assert out.values_by_host() == {"w1": "read w1", "w3": "read w3"}
    assert out["w2"].failed and out["w2"].value is None and out["w2"].message == "no dataset"
    assert [r.value for r in fleet.results if r.host == "w1"] == ["read w1", None]


def test_a_good_host_goes_on_when_another_raises(tmp_path):
    fleet = Fleet(hosts_of(tmp_path), forks=3)
    fleet.play(lambda h: [LocalStep("a", ValueError("boom") if h.name == "w2" else None), LocalStep("b")])
    fleet.close()
    ok = [(r.host, r.step) for r in fleet.results if r.status is Status.OK]
    assert sorted(ok) == [("w1", "a"), ("w1", "b"), ("w3", "a"), ("w3", "b")]
    assert fleet.dropped == {"w2": Status.FAILED} and fleet.exit_code() == 2


def test_standing_names_the_current_step_or_the_last_result(tmp_path):
    fleet = Fleet(hosts_of(tmp_path))
    fleet.play(lambda h: [LocalStep("a", StepFailed("w2 is broken") if h.name == "w2" else None)],
               hosts=fleet.hosts[:2])
    fleet.current["w1"] = "rsync /opt/v/ -> /opt/v.releases/x"
    fleet.close()
    assert fleet.standing() == ["w1: interrupted during 'rsync /opt/v/ -> /opt/v.releases/x' (last done: 'a', ok)",
                                "w2: 'a' failed: w2 is broken", "w3: not started"]


class Broken(Step):
    name = "broken"

    def decide(self, facts):
        return [Change("x", local_argv=["/nonexistent/rsync-binary"])]


def test_an_oserror_while_applying_fails_that_host_with_one_line(tmp_path):
    fleet = Fleet(hosts_of(tmp_path)[:1])
    fleet.play(lambda h: [Broken()])
    fleet.close()
    (r,) = fleet.results
    assert r.status is Status.FAILED and r.message.startswith("FileNotFoundError: ") and "\n" not in r.message


# ---------------------------------------------------------------- the live venv is never written
def test_release_id_changes_when_the_venv_changes_in_place(tmp_path):
    from specfleet.roles.venv_deploy import release_id
    venv = tmp_path / "venv"
    (venv / "lib").mkdir(parents=True)
    (venv / "lib" / "mod.py").write_text("x = 1\n")
    first = release_id(str(venv), {"digest": "abc"})
    (venv / "lib" / "mod.py").write_text("x = 22\n")  # same digest, new content
    os.utime(venv / "lib" / "mod.py", (1, 1))
    from specfleet.facts import rsync
    rsync._local_listings.clear()  # one fab run lists the bastion's venv once (its cache lives a run)
    second = release_id(str(venv), {"digest": "abc"})
    assert first.startswith("abc-") and second.startswith("abc-") and first != second


def test_a_changed_live_release_is_refused_and_bytecode_caches_are_left(tmp_path):
    from specfleet.roles.venv_deploy import ReleaseCopy
    from specfleet.steps.sync import Listing, local_listing
    venv = tmp_path / "venv"
    (venv / "lib" / "__pycache__").mkdir(parents=True)
    (venv / "lib" / "mod.py").write_text("x = 1\n")
    host = hosts_of(tmp_path)[0]
    step = ReleaseCopy(host, str(venv), "/opt/v.releases/r1", None)
    here = local_listing(str(venv) + "/")  # the tree's and the code's hashes, from one listing
    live = PathKind("link", "/opt/v.releases/r1")

    def facts(tree, code):
        return {"live": live, "listing": Listing(tree, code), "local_listing": here}
    assert step.decide(facts(here.tree, here.code)) == []
    assert step.bastion_facts(facts("0" * 64, here.code)) == {}  # never rsync -n into a live release
    assert step.decide(facts("0" * 64, here.code)) == []  # only __pycache__ differs
    with pytest.raises(StepFailed, match="live venv here and was changed on this host"):
        step.decide(facts("0" * 64, "1" * 64))


def test_a_crash_outside_the_fleet_run_exits_70_not_1(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent("""
        import specfleet.tasks.common as c
        def load(inventory):
            raise RuntimeError("injected crash before the run")
        c.load = load
    """))
    p = fab("facts", "--inventory", str(inventory(tmp_path)), tmp_path=tmp_path, env={"PYTHONPATH": str(hook)})
    assert p.returncode == 70, p.stdout + p.stderr
    assert p.stderr.splitlines()[-1] == "error: specfleet crashed: RuntimeError: injected crash before the run"
    assert "Traceback" in p.stderr  # no event log exists yet: the traceback is the only record
