"""Where a campaign runs (specfleet/backend/): the inventory picks the backend once, both backends have
the protocol's verbs with its parameters, and the tasks call the verbs without asking which backend
they hold. What each backend does is proven end to end: tests/e2e/test_bench.py, test_collect.py (SSH),
tests/e2e/test_slurm_fleet.py (a real slurmctld and slurmd)."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import yaml

from specfleet.backend import Backend, backend_for
from specfleet.backend.slurm import SlurmBackend
from specfleet.backend.ssh import SshBackend
from specfleet.inventory import load_inventory

ROOT = Path(__file__).resolve().parents[2]
VERBS = ("place", "start", "view", "stop", "fetch", "provision")
SLURM = {"kind": "slurm", "partition": "gpu", "time_limit": "01:00:00", "shared_dir": "/shared/sf"}


def inventory(tmp_path, **top):
    f = tmp_path / "inv.yml"
    f.write_text(yaml.safe_dump({**top, "hosts": {"w1": {"address": "10.0.0.1"}}}))
    return load_inventory(f)


def test_the_inventory_picks_the_backend(tmp_path):
    assert isinstance(backend_for(inventory(tmp_path)), SshBackend)
    assert isinstance(backend_for(inventory(tmp_path, scheduler={"kind": "ssh"})), SshBackend)
    slurm = backend_for(inventory(tmp_path, scheduler=SLURM))
    assert isinstance(slurm, SlurmBackend) and slurm.cfg.partition == "gpu" and slurm.kind == "slurm"


def test_both_backends_implement_every_verb_of_the_protocol():
    for impl in (SshBackend, SlurmBackend):
        assert isinstance(impl.__new__(impl), Backend), impl
        for verb in VERBS:
            want = inspect.signature(getattr(Backend, verb)).parameters
            got = inspect.signature(getattr(impl, verb)).parameters
            # the protocol's parameters, by name and kind, in order; an implementation may add defaulted ones
            assert [(n, p.kind) for n, p in got.items()][:len(want)] == [(n, p.kind) for n, p in want.items()], \
                (impl.__name__, verb)
            assert all(p.default is not p.empty for p in list(got.values())[len(want):]), (impl.__name__, verb)


def test_no_task_asks_which_backend_it_holds():
    """No `on_slurm` and no `inv.slurm` in tasks/: the backend is chosen once, by backend_for (the import
    rules keep the tasks from importing an implementation: tests/unit/test_import_rules.py)."""
    for f in sorted((ROOT / "tasks").glob("*.py")):
        text = f.read_text()
        assert not re.search(r"on_slurm|\.slurm\b|kind\s*==", text), f.name
