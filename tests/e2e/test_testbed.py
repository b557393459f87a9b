"""The testbed itself: real sshd, real routes and mounts, stand-ins that fail like the field."""
from __future__ import annotations

import io
import os
import subprocess

import paramiko
import pytest

from specfleet.inventory import load_inventory
from testbed import TestbedError
from testbed.net import assert_mgmt_route

pytestmark = pytest.mark.e2e
STOR_NET = "192.168.160.0/24"
MOUNT = "mount -t nfs4 -o ro,vers=4.2,hard,proto=tcp 192.168.160.7:/media/SSD-Storage/SW /mnt/fabrix"


def ssh_run(tb, host: str, cmd: str, user: str = "root") -> tuple[int, str, str]:
    c = tb.ssh(host, user=user)
    try:
        _, out, err = c.exec_command(cmd, timeout=30)
        rc = out.channel.recv_exit_status()
        return rc, out.read().decode(), err.read().decode()
    finally:
        c.close()


def root_snapshot() -> dict:
    def sh(*cmd):
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return {
        "netns": sh("ip", "netns", "list"),
        "links": sorted(l.split(":")[1].strip().split("@")[0] for l in sh("ip", "-o", "link").splitlines()),
        "routes": sh("ip", "route", "show", "table", "all"),
        "addrs": sh("ip", "-o", "addr"),
    }


def test_up_down_leaves_nothing_behind(testbed_factory):
    before = root_snapshot()
    tb = testbed_factory(3)
    during = root_snapshot()
    assert "sf-w3" in during["netns"] and "sf-br-mgmt" in during["links"]
    assert "unreachable 192.168.160.0/24" in during["routes"] or "unreachable 192.168.160.0/24" in before["routes"]
    tb.down()
    tb.down()  # idempotent
    assert root_snapshot() == before
    assert not tb.run_dir.exists() and not tb.disk_dir.exists()


def test_second_up_is_refused(testbed4):
    from testbed import Testbed
    with pytest.raises(TestbedError, match="already up"):
        Testbed().up(1)
    assert testbed4.status()["workers"] == 4  # the refused attempt broke nothing


def test_inventory_is_valid(testbed4):
    inv = load_inventory(testbed4.inventory_path)
    assert sorted(inv.hosts) == ["w1", "w2", "w3", "w4"]
    w2 = inv.hosts["w2"]
    # the field report's login: an ordinary user with passwordless sudo (docs/testbed.md)
    assert (w2.address, w2.user, w2.become, w2.var("storage_ip")) == ("10.10.30.15", "maymust", True,
                                                                      "192.168.160.15")
    assert w2.var("nfs_server") == "192.168.160.7" and w2.var("testbed") is True
    assert inv.groups["workers"] == ["w1", "w2", "w3", "w4"]


def test_ssh_every_worker_with_strict_known_hosts(testbed4):
    for i, w in enumerate(testbed4.workers, 1):
        rc, out, _ = ssh_run(testbed4, w, "hostname; ip -o -4 addr show ens35")
        assert rc == 0 and out.startswith(f"sf-{w}\n") and f"192.168.160.{13 + i}/24" in out
    # a host key that is not in known_hosts is rejected
    c = paramiko.SSHClient()
    c.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        c.connect(testbed4.address("w1"), username="root", key_filename=str(testbed4.key),
                  allow_agent=False, look_for_keys=False, timeout=5)
    c.close()


def test_the_login_user_is_ordinary_with_passwordless_sudo_and_a_home_of_its_own(testbed4):
    """As on the field report's cluster (issue 37): the inventory's login is maymust, not root; sudo -n works
    for it on every worker; its home is its own and private to the worker."""
    for w in testbed4.workers:
        rc, out, err = ssh_run(testbed4, w, "id -un; id -u; sudo -n id -un; echo \"$HOME\"; touch ~/sf-home-test && "
                                            "stat -c %U ~/sf-home-test && rm ~/sf-home-test", user="maymust")
        name, uid, sudo_name, home, owner = out.split()
        assert rc == 0 and (name, sudo_name, home, owner) == ("maymust", "root", "/home/maymust", "maymust"), err
        assert uid != "0"
    assert not os.path.exists("/home/maymust/sf-home-test")


def test_private_paths_are_private(testbed4):
    c = testbed4.ssh("w1")
    try:
        c.open_sftp().putfo(io.BytesIO(b"nvidia\n"), "/etc/modules-load.d/sf-private-test.conf")
    finally:
        c.close()
    try:
        assert testbed4.exec("w1", "cat /etc/modules-load.d/sf-private-test.conf").stdout == "nvidia\n"
        assert testbed4.exec("w2", "test -e /etc/modules-load.d/sf-private-test.conf").returncode == 1
        assert not os.path.exists("/etc/modules-load.d/sf-private-test.conf")
        for path in ("/opt", "/var/lib", "/root"):
            testbed4.exec("w1", f"touch {path}/sf-private-test", check=True)
            assert testbed4.exec("w2", f"test -e {path}/sf-private-test").returncode == 1
            assert not os.path.exists(f"{path}/sf-private-test")
    finally:
        testbed4.exec("w1", "rm -f /etc/modules-load.d/sf-private-test.conf /opt/sf-private-test "
                            "/var/lib/sf-private-test /root/sf-private-test")


def test_root_namespace_cannot_reach_storage_net(testbed4):
    p = subprocess.run(["ip", "route", "get", "192.168.160.7"], capture_output=True, text=True)
    assert p.returncode != 0 and "No route to host" in p.stderr  # the unreachable route answers
    shown = subprocess.run(["ip", "route", "show", "type", "unreachable", STOR_NET],
                           capture_output=True, text=True).stdout
    assert shown.startswith("unreachable 192.168.160.0/24")
    with pytest.raises(TestbedError, match="refusing to connect to 192.168.160.7"):
        assert_mgmt_route("192.168.160.7")
    with pytest.raises(TestbedError, match="via eth0|refusing"):
        assert_mgmt_route("192.0.2.1")  # the machine's own gateway: never a testbed target
    assert_mgmt_route(testbed4.address("w4"))  # allowed


def test_stale_route_fails_nfs_mount_and_fix_works(testbed4):
    tb = testbed4
    tb.fault("w2", "stale-route")
    try:
        rc, out, _ = ssh_run(tb, "w2", f"ip -o route show {STOR_NET}")
        assert "dev ens33" in out and "dev ens35" not in out
        rc, out, err = ssh_run(tb, "w2", f"mkdir -p /mnt/fabrix && {MOUNT}")
        assert rc == 32 and "mount.nfs4: No route to host" in err
        fix = (f"ip route del {STOR_NET} dev ens33 && "
               f"ip route add {STOR_NET} dev ens35 src {tb.storage_address('w2')}")
        assert ssh_run(tb, "w2", fix)[0] == 0
        rc, out, err = ssh_run(tb, "w2", f"{MOUNT} && cat /mnt/fabrix/models/Qwen3-32B/config.json")
        assert rc == 0, err
        assert '"weights_gib": 61.03' in out
        rc, _, err = ssh_run(tb, "w2", "touch /mnt/fabrix/x")
        assert rc != 0 and "Read-only file system" in err
        assert tb.exec("w1", "test -e /mnt/fabrix/models").returncode == 1  # mounted on w2 only
    finally:
        tb.exec("w2", f"umount /mnt/fabrix; ip route replace {STOR_NET} dev ens35 "
                      f"src {tb.storage_address('w2')}")


def test_dup_ip_shows_same_address_on_two_hosts(testbed4):
    tb = testbed4
    for w in ("w3", "w4"):
        tb.fault(w, "dup-ip")
    try:
        for w in ("w3", "w4"):
            assert "192.168.160.179/24" in tb.exec(w, "ip -o -4 addr show ens35").stdout
            yml = tb.exec(w, "stat -c %a /etc/netplan/99-ens35.yaml && cat /etc/netplan/99-ens35.yaml").stdout
            assert yml.startswith("600\n") and "192.168.160.179/24" in yml and tb.storage_address(w) in yml
        # the per-host check the runner can use: duplicate address detection by ARP
        p = tb.exec("w3", "arping -D -I ens35 -c 2 -w 3 192.168.160.179")
        assert p.returncode == 1 and "Received 1 response" in p.stdout
    finally:
        for w in ("w3", "w4"):
            tb.exec(w, "ip addr del 192.168.160.179/24 dev ens35; rm -f /etc/netplan/99-ens35.yaml")


def test_module_lost_then_modprobe_fixes(testbed4):
    tb = testbed4
    assert tb.exec("w1", "nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits").stdout == "0\n"
    tb.fault("w1", "module-lost")
    rc, out, _ = ssh_run(tb, "w1", "nvidia-smi")
    assert rc == 9 and "couldn't communicate with the NVIDIA driver" in out
    rc, _, err = ssh_run(tb, "w1", "modprobe nvidia-foo")
    assert rc == 1 and "FATAL: Module nvidia_foo not found in directory /lib/modules/" in err
    assert ssh_run(tb, "w1", "modprobe nvidia && modprobe nvidia_uvm")[0] == 0
    rc, out, _ = ssh_run(tb, "w1", "nvidia-smi --query-gpu=name,memory.used --format=csv,noheader,nounits")
    assert rc == 0 and out.endswith(", 0\n")
    assert "nvidia_uvm" in tb.exec("w1", "lsmod").stdout


def test_gpu_reservation_counts_only_live_pids(testbed4):
    tb = testbed4
    res = "/var/lib/specfleet-testbed/gpu/reservations"
    start = f"sleep 300 >/dev/null 2>&1 </dev/null & echo 2048 > {res}/$! && echo $!"
    rc, out, _ = ssh_run(tb, "w4", start)
    live = int(out.strip())
    dead = int(tb.exec("w4", "sh -c 'echo $$'").stdout)  # that shell has exited
    tb.exec("w4", f"echo 4096 > {res}/{dead}", check=True)
    q = "nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits"
    assert tb.exec("w4", q).stdout == "2048\n"
    assert tb.status()["hosts"]["w4"]["gpu_memory_used_mib"] == 2048
    assert tb.exec("w4", f"test -e {res}/{dead}").returncode == 1  # pruned
    tb.exec("w4", f"kill {live}; while kill -0 {live} 2>/dev/null; do sleep 0.05; done")
    assert tb.exec("w4", q).stdout == "0\n"


def test_engine_faults_go_to_sim_json(testbed4):
    tb = testbed4
    sim = "cat /var/lib/specfleet-testbed/sim.json"
    tb.fault("w3", "crash-mid-bench")
    assert '"fault": "crash-mid-bench"' in tb.exec("w3", sim).stdout
    tb.fault("w3", "clear-engine-fault")
    assert '"fault": null' in tb.exec("w3", sim).stdout
    with pytest.raises(TestbedError, match="unknown fault"):
        tb.fault("w3", "meteor")


def test_reboot_loads_only_listed_modules(testbed_factory):
    tb = testbed_factory(1)
    assert "nvidia" in tb.status()["hosts"]["w1"]["modules"]  # provisioned host
    tb.reboot("w1")
    assert tb.status()["hosts"]["w1"]["modules"] == []
    assert tb.exec("w1", "nvidia-smi").returncode == 9
    tb.exec("w1", "printf '# GPU driver\\n\\nnvidia\\n; old\\nnvidia-uvm\\n' > /etc/modules-load.d/nvidia.conf",
            check=True)
    tb.reboot("w1")
    assert sorted(tb.status()["hosts"]["w1"]["modules"]) == ["nvidia", "nvidia_uvm"]
    assert tb.exec("w1", "nvidia-smi -L").returncode == 0


def test_reboot_keeps_disk_and_empties_tmp(testbed_factory):
    tb = testbed_factory(2)
    for path in ("/opt/keep", "/etc/keep", "/var/lib/keep", "/root/keep", "/tmp/gone"):
        assert ssh_run(tb, "w2", f"echo x > {path}")[0] == 0
    old_pid = tb.pid("w2")
    tb.fault("w2", "stale-route")
    tb.reboot("w2")
    assert tb.pid("w2") != old_pid
    # same host key: the strict known_hosts still accepts the rebooted host
    rc, out, _ = ssh_run(tb, "w2", "ls /opt/keep /etc/keep /var/lib/keep /root/keep; ls -A /tmp; "
                                   f"ip -o route show {STOR_NET}")
    assert rc == 0 and "/tmp/gone" not in out and "gone" not in out
    assert "dev ens35" in out  # the network came back from netplan
    assert tb.exec("w1", "test -e /opt/keep").returncode == 1


def test_worker_etc_is_its_own_and_boots_with_a_dangling_modules_conf(testbed_factory):
    """A stock Debian 12 without kmod: modules-load.d/modules.conf -> ../modules dangles.

    The worker boots anyway (the stand-in logs the entry and goes on, as
    systemd-modules-load does), and its /etc entries the roles manage are
    seeded like a fresh worker's, whatever the controller machine has.
    """
    tb = testbed_factory(1, kmod=False)
    out = tb.exec("w1", "readlink /etc/modules-load.d/modules.conf; test -e /etc/modules; echo $?; "
                        "ls -A /etc/modules-load.d /etc/netplan; test -e /etc/specfleet; echo $?",
                  check=True).stdout.split()
    assert out == ["../modules", "1", "/etc/modules-load.d:", "modules.conf",
                   "/etc/netplan:", "50-testbed.yaml", "1"]
    assert "/dev/vda1" in tb.exec("w1", "cat /etc/fstab", check=True).stdout
    # a reboot reads modules-load.d with the dangling link in it
    tb.exec("w1", "echo nvidia > /etc/modules-load.d/nvidia.conf", check=True)
    tb.reboot("w1")
    assert tb.status()["hosts"]["w1"]["modules"] == ["nvidia"]
    log = (tb.run_dir / "hosts" / "w1" / "sshd.log").read_text()
    assert "Failed to open /etc/modules-load.d/modules.conf, ignoring" in log
    # nothing the worker wrote reached the controller's /etc
    assert not os.path.exists("/etc/modules-load.d/nvidia.conf")
