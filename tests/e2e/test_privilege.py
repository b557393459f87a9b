"""Privilege escalation only where a step needs it: a non-root login with passwordless sudo.

The worker's /etc is private to it, so the user and its sudoers file exist on
that worker only.
"""
from __future__ import annotations

import pytest

from e2e_helpers import derived_inventory, events, fab, host_sh

pytestmark = pytest.mark.e2e

USER = "sfops"


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


def test_without_become_root_steps_fail_clearly(testbed_factory, tmp_path):
    tb = testbed_factory(workers=1)
    add_user(tb, "w1", sudo=True)
    out = fab("provision", "--only", "nvidia", inventory=as_user(tb, tmp_path, become=False),
              runs=tmp_path / "r")
    assert out.returncode == 2
    assert host_sh(tb, "w1", "test -e /etc/modules-load.d/nvidia.conf").returncode != 0
    assert "Permission denied" in out.stdout or "permission" in out.stdout.lower()
