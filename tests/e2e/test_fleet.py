"""The fleet core against real sshd hosts: idempotence, check mode, failure isolation, host keys.

Host state is read back without SSH (nsenter), so a test never trusts the
tool to report on itself.
"""
from __future__ import annotations

import os
import shutil

import pytest

from specfleet.events import EventLog, Redactor
from specfleet.exits import EXIT_FAILED, EXIT_UNREACHABLE
from specfleet.fleet import Fleet
from specfleet.inventory import load_inventory
from specfleet.step import Status
from specfleet.steps.command import Assert, Command
from specfleet.steps.files import Directory, FileContent, LineInFile
from specfleet.steps.net import Route
from specfleet.facts import rsync
from specfleet.steps.sync import RsyncTree, local_listing

from e2e_helpers import derived_inventory, events, fab, host_sh, inventory_of

pytestmark = pytest.mark.e2e
EVIL = "evil; rm -rf / #$(touch /tmp/pwned)`touch /tmp/pwned2`"


def every_step(host, src_tree):
    return [
        Directory("/opt/sf-test/dir", "0750"),
        FileContent("/etc/modules-load.d/sf-test.conf", "nvidia\nnvidia_uvm\n"),
        LineInFile("/etc/sf-test-lines", "alpha"),
        Route("192.168.160.0/24", "ens35", src=host.vars["storage_ip"]),
        RsyncTree(host, str(src_tree), "/opt/sf-test/tree"),
        Command("touch marker", "touch /opt/sf-test/marker", creates="/opt/sf-test/marker"),
        FileContent(f"/tmp/{EVIL}", EVIL + "\n"),
    ]


@pytest.fixture
def src_tree(tmp_path):
    d = tmp_path / "tree"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("a\n")
    (d / "sub" / "b.bin").write_bytes(os.urandom(4096))
    return d


def run(inv_path, steps_for, **kw):
    inv = load_inventory(inv_path)
    fleet = Fleet(list(inv.hosts.values()), **kw)
    try:
        fleet.play(steps_for)
    finally:
        fleet.close()
    return fleet


def test_every_step_converges_then_changes_nothing(testbed_factory, src_tree):
    # as root: RsyncTree runs rsync as the login user, into a root-owned /opt (the root-login case)
    tb = testbed_factory(workers=4, login="root")
    tb.fault("w1", "stale-route")
    inv = inventory_of(tb)
    first = run(inv, lambda h: every_step(h, src_tree))
    assert first.exit_code() == 0, [r for r in first.results if r.status is not Status.CHANGED]
    changed = {(r.host, r.step) for r in first.results if r.changed}
    assert ("w1", "route 192.168.160.0/24 dev ens35") in changed
    assert ("w2", "route 192.168.160.0/24 dev ens35") not in changed
    assert len([r for r in first.results if r.changed]) == 4 * 6 + 1
    second = run(inv, lambda h: every_step(h, src_tree))
    assert [r for r in second.results if r.status is not Status.OK] == []
    for w in ("w1", "w2", "w3", "w4"):
        out = host_sh(tb, w, "cat /etc/modules-load.d/sf-test.conf /etc/sf-test-lines; "
                             "stat -c %a /opt/sf-test/dir; ls /opt/sf-test/tree/sub; "
                             "ip -o route show 192.168.160.0/24").stdout
        assert "nvidia_uvm" in out and "alpha" in out and "750" in out and "b.bin" in out
        assert "dev ens35" in out and "dev ens33" not in out
    assert host_sh(tb, "w1", f"cat /tmp/{shlex_q(EVIL)}").stdout == EVIL + "\n"
    assert host_sh(tb, "w1", "ls /tmp/pwned /tmp/pwned2 2>&1").returncode != 0
    # the bastion's own filesystem is untouched too
    assert not os.path.exists("/tmp/pwned") and not os.path.exists("/etc/modules-load.d/sf-test.conf")


def shlex_q(s):
    import shlex
    return shlex.quote(s)


def test_check_mode_reports_and_changes_nothing(testbed_factory, src_tree):
    tb = testbed_factory(workers=4)
    tb.fault("w2", "stale-route")
    before = {w: host_sh(tb, w, "ip -o route; ls -la /opt /etc/modules-load.d").stdout for w in tb.workers}
    fleet = run(inventory_of(tb), lambda h: every_step(h, src_tree), check=True)
    would = [r for r in fleet.results if r.changed]
    assert {r.host for r in would} == {"w1", "w2", "w3", "w4"}
    assert any(r.host == "w2" and r.step.startswith("route") for r in would)
    after = {w: host_sh(tb, w, "ip -o route; ls -la /opt /etc/modules-load.d").stdout for w in tb.workers}
    assert before == after


def test_failed_and_unreachable_hosts_do_not_stop_the_others(testbed_factory, tmp_path):
    tb = testbed_factory(workers=4)

    def edit(doc):
        doc["hosts"]["ghost"] = {"address": "10.10.30.99", "connect_timeout": 1}
    inv = derived_inventory(tb, tmp_path, edit)

    def steps(h):
        fail = Assert("must fail on w2", "test $(hostname) != sf-w2 && test $(hostname) != w2", "w2 is broken")
        return [fail, FileContent("/opt/after-failure", "x\n")]
    fleet = run(inv, steps)
    assert fleet.exit_code() == EXIT_FAILED | EXIT_UNREACHABLE
    assert fleet.dropped == {"w2": Status.FAILED, "ghost": Status.UNREACHABLE}
    for w in ("w1", "w3", "w4"):
        assert host_sh(tb, w, "cat /opt/after-failure").stdout == "x\n"
    assert host_sh(tb, "w2", "test -e /opt/after-failure").returncode != 0
    skipped = [r for r in fleet.results if r.status is Status.SKIPPED]
    assert {(r.host, r.step) for r in skipped} >= {("w2", "file /opt/after-failure")}


def test_cli_exit_codes_and_recap(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    # w1 has its venv (a python that runs at venv_path), w2 has none: reachable, but not ready for a campaign
    assert host_sh(tb, "w1", "mkdir -p /opt/vllm-venv/bin && ln -s /usr/bin/python3 /opt/vllm-venv/bin/python"
                   ).returncode == 0
    ok = fab("facts", inventory=inventory_of(tb), runs=tmp_path / "runs")
    assert ok.returncode == 0, ok.stderr
    assert "RECAP facts" in ok.stdout and "w1" in ok.stdout and "ens35" in ok.stdout
    recap = ok.stdout[ok.stdout.index("RECAP facts"):]
    row = {h: next(ln for ln in recap.splitlines() if f" {h} " in ln) for h in ("w1", "w2")}
    assert "fine" in row["w1"] and "not ready: no venv at /opt/vllm-venv" in row["w2"], recap
    assert "MISSING: /opt/vllm-venv" in ok.stdout and "/opt/vllm-venv (Python 3." in ok.stdout, ok.stdout
    # each worker's GPU, from the nvidia-smi stand-in: index, name, memory (the table may fold the name)
    assert ok.stdout.count("0: NVIDIA RTX PRO") == len(tb.workers) and "97887" in ok.stdout, ok.stdout
    commands = [e for e in events(tmp_path / "runs") if e.get("event") == "commands"]
    assert {e["host"]: e["count"] for e in commands} == {w: 1 for w in tb.workers}  # all facts: one round trip

    def edit(doc):
        doc["hosts"]["ghost"] = {"address": "10.10.30.99", "connect_timeout": 1}
    unreachable = fab("facts", inventory=derived_inventory(tb, tmp_path, edit), runs=tmp_path / "runs")
    assert unreachable.returncode == EXIT_UNREACHABLE, unreachable.stdout + unreachable.stderr
    assert "unreachable" in unreachable.stdout
    bad = fab("facts", "--hosts", "w1,nope", inventory=inventory_of(tb))
    assert bad.returncode == 1 and "'nope'" in bad.stderr


def test_unknown_and_changed_host_keys_are_refused(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")

    def unknown(doc):
        doc["all"]["known_hosts"] = str(empty)
    inv = derived_inventory(tb, tmp_path, unknown)
    fleet = run(inv, lambda h: [FileContent("/opt/keys", "x\n")])
    assert fleet.exit_code() == EXIT_UNREACHABLE
    msg = fleet.results[0].message
    assert "not in the known_hosts" in msg and "--accept-new-host-keys" in msg
    assert host_sh(tb, "w1", "test -e /opt/keys").returncode != 0

    # accept-new records unknown keys and proceeds
    fleet = run(inv, lambda h: [FileContent("/opt/keys", "x\n")], accept_new=True)
    assert fleet.exit_code() == 0
    assert "10.10.30.14" in empty.read_text()

    # a changed key is refused even with accept-new
    changed = tmp_path / "known_hosts_changed"
    real = inventory_of(tb).parent  # noqa: F841  (documentation: the testbed's own file is untouched)
    lines = tb.known_hosts.read_text().splitlines()
    other_key = lines[1].split(" ", 1)[1]  # w2's key, claimed for w1's address
    changed.write_text(f"10.10.30.14 {other_key}\n")

    def changed_kh(doc):
        doc["all"]["known_hosts"] = str(changed)
    fleet = run(derived_inventory(tb, tmp_path, changed_kh), lambda h: [FileContent("/opt/keys2", "x\n")],
                accept_new=True)
    w1 = [r for r in fleet.results if r.host == "w1"][0]
    assert w1.status is Status.UNREACHABLE and "CHANGED" in w1.message
    assert host_sh(tb, "w1", "test -e /opt/keys2").returncode != 0


def test_event_log_records_every_step_and_masks_secrets(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    secret = "hf_SuperSecretToken123"

    def edit(doc):
        doc["all"]["vars"]["hf_token"] = secret
    inv_path = derived_inventory(tb, tmp_path, edit)
    inv = load_inventory(inv_path)
    log = EventLog("test", directory=tmp_path / "runs", redact=Redactor(inv.secrets()))
    fleet = Fleet(list(inv.hosts.values()), events=log, redact=log.redact)
    fleet.play(lambda h: [Command("leak", f"echo {h.vars['hf_token']} >&2; exit 1", unless="false")])
    fleet.close()
    log.close()
    recs = [e for e in events(tmp_path / "runs") if e.get("event") == "step"]
    assert {r["host"] for r in recs} == {"w1", "w2"}
    for r in recs:
        assert {"time", "host", "step", "status", "changed", "duration_s", "stderr_tail"} <= set(r)
        assert r["status"] == "failed"
    text = "".join(p.read_text() for p in (tmp_path / "runs").glob("*.jsonl"))
    assert secret not in text and "********" in text
    assert all(secret not in r.message + r.stderr_tail for r in fleet.results)


def test_rsync_check_lists_and_second_sync_transfers_nothing(testbed_factory, src_tree):
    tb = testbed_factory(workers=2, login="root")  # rsync as the login user into /opt
    inv = load_inventory(inventory_of(tb))
    host = inv.hosts["w1"]
    step = RsyncTree(host, str(src_tree), "/opt/tree-copy")
    items = step.itemize_fact().gather_local()
    assert any("a.txt" in ln for ln in items)
    fleet = run(inventory_of(tb), lambda h: [RsyncTree(h, str(src_tree), "/opt/tree-copy")])
    assert all(r.changed for r in fleet.results)
    assert step.itemize_fact().gather_local() == []
    # the host's listing hash (what a no-op run compares, without OpenSSH) equals the bastion's
    fact = step.facts()["listing"]
    listing = fact.parse(host_sh(tb, "w1", fact.command()).stdout, 0)
    values = {"listing": listing, "local_listing": local_listing(step.src)}
    assert step.in_sync(values) and step.bastion_facts(values) == {} and step.decide(values) == []
    shutil.rmtree(src_tree / "sub")
    rsync._local_listings.clear()
    values["local_listing"] = local_listing(step.src)  # the bastion's tree changed: rsync -n itemizes it
    values.update({k: f.gather_local() for k, f in step.bastion_facts(values).items()})
    again = step.decide(values)
    assert again and "deleting" in again[0].diff
