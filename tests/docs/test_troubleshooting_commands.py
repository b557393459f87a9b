"""Every command docs/troubleshooting.md shows, run in order against the testbed with the entry's fault.

The page and the tool cannot disagree: each ```console block's commands run as written (the bastion's
`$ fab ...` from the repository, `w1$ ...` inside worker w1), their exit codes and the output excerpts
under them are checked. Campaign commands name `plans/qwen3-32b.yml`; here they run with
tests/docs/plans/tiny.yml under a campaign name of the entry's own (docs/troubleshooting.md says so).
One fresh 2-worker testbed per entry; w2's simulated engine is 10 % slower, so the baselines differ.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from doctest_md import sections, squash
from e2e_helpers import FAB, PROJECT, host_sh, inventory_of

pytestmark = pytest.mark.e2e

PAGE = PROJECT / "docs/troubleshooting.md"
TINY = PROJECT / "tests/docs/plans/tiny.yml"
PAGE_PLAN, PAGE_CAMPAIGN = "plans/qwen3-32b.yml", "qwen3-32b-specdec"
SECTIONS = [s for s in sections(PAGE) if not s.skip]


def test_the_page_has_runnable_entries():
    names = {s.slug for s in SECTIONS}
    for must in ("gpu-not-visible-after-a-kernel-upgrade", "stale-nfs-route", "duplicate-ip-address",
                 "server-dies-during-load", "orphaned-enginecore-holding-gpu-memory", "nodes-not-equivalent",
                 "ssh-dropped-mid-campaign", "pip-stalls-on-a-flaky-mirror"):
        assert must in names
    assert all(s.commands for s in SECTIONS)


def _hold_gpu(tb, host: str, mib: int) -> None:
    """A process on the worker that holds `mib` of the simulated GPU (docs/dev/contracts.md)."""
    p = host_sh(tb, host, "setsid sleep 3600 </dev/null >/dev/null 2>&1 & echo $!")
    pid = int(p.stdout.strip())
    r = host_sh(tb, host, f"mkdir -p /var/lib/specfleet-testbed/gpu/reservations && "
                          f"echo {mib} > /var/lib/specfleet-testbed/gpu/reservations/{pid}")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("section", SECTIONS, ids=[s.slug for s in SECTIONS])
def test_troubleshooting_entry(section, testbed_factory, tmp_path):
    tb = testbed_factory(workers=2, speed={"w2": 0.9})
    inv = inventory_of(tb)
    campaign = f"docs-{section.slug}"[:60]
    plan = yaml.safe_load(TINY.read_text())
    plan["campaign"] = campaign
    plan["benchmark"]["dataset_path"] = str((TINY.parent / plan["benchmark"]["dataset_path"]).resolve())
    plan_path = tmp_path / "plan.yml"
    plan_path.write_text(yaml.safe_dump(plan, sort_keys=False))
    env = {**os.environ, "COLUMNS": "200", "SPECFLEET_INVENTORY": str(inv),
           "SPECFLEET_RUNS_DIR": str(tmp_path / "runs")}

    def fab_argv(cmd: str) -> list[str]:
        argv = shlex.split(cmd.replace(PAGE_PLAN, str(plan_path)))
        assert argv[0] == "fab", f"bastion commands on the page are fab tasks: {cmd}"
        return [FAB, *argv[1:]]

    if "provision" in section.options.get("needs", ""):
        p = subprocess.run([FAB, "provision"], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    for spec in filter(None, section.options.get("fault", "").split(",")):
        host, kind = spec.split(":")
        tb.fault(host, kind)
    for spec in filter(None, section.options.get("hold-gpu", "").split(",")):
        host, mib = spec.split(":")
        _hold_gpu(tb, host, int(mib))

    results = PROJECT / "results" / campaign
    try:
        for c in section.commands:
            if c.where is None:
                p = subprocess.run(fab_argv(c.cmd), cwd=PROJECT, env=env, capture_output=True, text=True,
                                   timeout=300)
            else:
                p = host_sh(tb, c.where, c.cmd.replace(PAGE_CAMPAIGN, campaign))
            out = p.stdout + p.stderr
            where = f"{c.where}$ " if c.where else "$ "
            assert p.returncode == c.exit_code, f"{where}{c.cmd}: exit {p.returncode}, the page says " \
                                                f"{c.exit_code}\n{out[-4000:]}"
            flat = squash(out)
            for line in c.expect:
                assert squash(line) in flat, f"{where}{c.cmd}: the page shows {line!r}; output:\n{out[-4000:]}"
    finally:
        shutil.rmtree(results, ignore_errors=True)
