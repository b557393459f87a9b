"""`fab provision` end to end on the testbed, with the field report's faults injected.

Every assertion about a host reads the host itself (nsenter), not specfleet's output.
"""
from __future__ import annotations

import json

import pytest

from e2e_helpers import events, fab, host_sh, inventory_of

pytestmark = pytest.mark.e2e


def step_events(runs):
    return [e for e in events(runs) if e.get("event") == "step"]


def changed_by_host(recs):
    out = {}
    for r in recs:
        out.setdefault(r["host"], 0)
        out[r["host"]] += r["changed"]
    return out


def faulty_testbed(testbed_factory, workers):
    tb = testbed_factory(workers=workers)
    tb.fault("w1", "stale-route")
    tb.fault("w1", "dup-ip")
    tb.fault("w2", "dup-ip")
    tb.fault("w2", "module-lost")
    return tb


@pytest.mark.parametrize("workers", [2, 4])
def test_provision_fixes_the_report_faults_then_changes_nothing(testbed_factory, tmp_path, workers):
    tb = faulty_testbed(testbed_factory, workers)
    inv = inventory_of(tb)
    assert host_sh(tb, "w2", "nvidia-smi").returncode != 0

    first = fab("provision", inventory=inv, runs=tmp_path / "r1")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert "192.168.160.179" in first.stdout and "w1 (ens35), w2 (ens35)" in first.stdout
    for w in tb.workers:
        state = host_sh(tb, w, "ip -o route show 192.168.160.0/24; findmnt -n -o SOURCE --mountpoint /mnt/fabrix;"
                               "cat /etc/modules-load.d/nvidia.conf; nvidia-smi -L; readlink /opt/vllm-venv;"
                               "/opt/vllm-venv/bin/python -c 'import vllm; print(vllm.SIMULATED)';"
                               "grep -c CUDA_HOME /etc/specfleet/vllm.env; ls /var/lib/specfleet").stdout
        assert "dev ens35" in state and "dev ens33" not in state, state
        assert "192.168.160.7:/media/SSD-Storage/SW" in state
        assert "nvidia_uvm" in state and "GPU 0" in state
        assert "/opt/vllm-venv.releases/" in state and "True" in state
        assert "runner.py" in state and "datasets" in state
    # the mount is read-only and readable
    assert host_sh(tb, "w1", "touch /mnt/fabrix/x").returncode != 0
    assert host_sh(tb, "w1", "cat /mnt/fabrix/models/Qwen3-32B/config.json").returncode == 0

    second = fab("provision", inventory=inv, runs=tmp_path / "r2")
    assert second.returncode == 0, second.stdout[-3000:]
    recs = step_events(tmp_path / "r2")
    assert changed_by_host(recs) == {w: 0 for w in [*tb.workers, "bastion"]}, \
        [r for r in recs if r["changed"]]
    # a no-op provision costs each worker one SSH command: all steps' facts in one batch
    commands = {e["host"]: e["count"] for e in events(tmp_path / "r2") if e.get("event") == "commands"}
    assert commands == {w: 1 for w in tb.workers}, commands
    # the duplicate is still reported (reporting is the default; removal is explicit)
    assert "192.168.160.179" in second.stdout


def test_check_on_a_fresh_testbed_lists_changes_and_changes_nothing(testbed_factory, tmp_path):
    tb = faulty_testbed(testbed_factory, 2)
    snap = "ip -o route; ip -o -4 addr; findmnt -n --mountpoint /mnt/fabrix; ls -la /opt /etc/modules-load.d " \
           "/etc/specfleet /var/lib 2>&1; nvidia-smi -L 2>&1"
    before = {w: host_sh(tb, w, snap).stdout for w in tb.workers}
    out = fab("provision", "--check", "--diff", inventory=inventory_of(tb), runs=tmp_path / "r")
    assert out.returncode == 0, out.stdout[-3000:]
    text = out.stdout
    for expected in ("would change", "delete stale route '192.168.160.0/24 dev ens33 scope link'",
                     "create /etc/modules-load.d/nvidia.conf", "+nvidia_uvm", "modprobe nvidia",
                     "mount 192.168.160.7:/media/SSD-Storage/SW on /mnt/fabrix",
                     "create /etc/specfleet/vllm.env", "switch /opt/vllm-venv"):
        assert expected in text, expected
    after = {w: host_sh(tb, w, snap).stdout for w in tb.workers}
    assert before == after


def test_reboot_keeps_the_gpu_only_with_the_modules_file(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    inv = inventory_of(tb)
    assert fab("provision", "--only", "nvidia", "--hosts", "w1", inventory=inv, runs=tmp_path / "r").returncode == 0
    tb.reboot("w1")
    tb.reboot("w2")
    assert host_sh(tb, "w1", "nvidia-smi -L").returncode == 0
    assert host_sh(tb, "w2", "nvidia-smi -L").returncode != 0  # no modules-load file on w2

    # revert removes the file; the next reboot loses the GPU again
    rev = fab("provision", "--revert", "nvidia", "--hosts", "w1", inventory=inv, runs=tmp_path / "r")
    assert rev.returncode == 0, rev.stdout
    assert host_sh(tb, "w1", "test -e /etc/modules-load.d/nvidia.conf").returncode != 0
    tb.reboot("w1")
    assert host_sh(tb, "w1", "nvidia-smi -L").returncode != 0


def test_duplicate_ip_removal_is_explicit_and_cleans_netplan(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    tb.fault("w1", "dup-ip")
    tb.fault("w2", "dup-ip")
    inv = inventory_of(tb)
    out = fab("provision", "--only", "network", "--remove-dup-ip", "w2", inventory=inv, runs=tmp_path / "r")
    assert out.returncode == 0, out.stdout
    assert "192.168.160.179" not in host_sh(tb, "w2", "ip -o -4 addr; cat /etc/netplan/*.yaml").stdout
    assert "192.168.160.179" in host_sh(tb, "w1", "ip -o -4 addr").stdout
    tb.reboot("w2")  # netplan no longer adds it back
    assert "192.168.160.179" not in host_sh(tb, "w2", "ip -o -4 addr").stdout
    again = fab("provision", "--only", "network", inventory=inv, runs=tmp_path / "r2")
    assert "no IPv4 address is held by two hosts" in again.stdout


def test_revert_of_venv_env_and_nfs(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    inv = inventory_of(tb)
    assert fab("provision", inventory=inv, runs=tmp_path / "r").returncode == 0
    first = host_sh(tb, "w1", "readlink /opt/vllm-venv").stdout.strip()

    # a second release: move the link by hand to a copy, as an older deploy would have left it
    host_sh(tb, "w1", f"cp -a {first} /opt/vllm-venv.releases/older && "
                      f"ln -sfn /opt/vllm-venv.releases/older /opt/vllm-venv")
    assert fab("provision", "--only", "venv-deploy", inventory=inv, runs=tmp_path / "r").returncode == 0
    assert host_sh(tb, "w1", "readlink /opt/vllm-venv").stdout.strip() == first
    rb = fab("provision", "--revert", "venv-deploy", "--hosts", "w1", inventory=inv, runs=tmp_path / "r")
    assert rb.returncode == 0, rb.stdout
    assert host_sh(tb, "w1", "readlink /opt/vllm-venv").stdout.strip() == "/opt/vllm-venv.releases/older"

    for role, probe in (("env", "test -e /etc/specfleet/vllm.env"),
                        ("nfs", "findmnt --mountpoint /mnt/fabrix")):
        r = fab("provision", "--revert", role, inventory=inv, runs=tmp_path / "r")
        assert r.returncode == 0, r.stdout
        for w in tb.workers:
            assert host_sh(tb, w, probe).returncode != 0, (role, w)


def test_a_host_that_cannot_be_fixed_fails_alone(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    # w2's storage NIC loses its address: the route cannot be fixed, and provision says why
    host_sh(tb, "w2", "ip addr flush dev ens35")
    out = fab("provision", "--only", "nfs,model", inventory=inventory_of(tb), runs=tmp_path / "r")
    assert out.returncode == 2, out.stdout
    recs = step_events(tmp_path / "r")
    failed = [r for r in recs if r["status"] == "failed"]
    assert [r["host"] for r in failed] == ["w2"] and "ens35" in failed[0]["message"]
    assert host_sh(tb, "w1", "findmnt --mountpoint /mnt/fabrix").returncode == 0
    log = json.dumps(recs)
    assert "skipped" in log
