"""`venv_source: provided` (the workers already have the venv: a pre-built image) and `skip_roles`:
inventory in, the steps and manifest the roles produce out."""
from __future__ import annotations

import types
from pathlib import Path

import pytest
import yaml

from specfleet.errors import UserError
from specfleet.inventory import InventoryError, load_inventory
from specfleet.roles import apply, env, vars_model, venv, venv_deploy
from specfleet.steps.command import Assert

def _inv(tmp_path: Path, **vars) -> object:
    (tmp_path / "key").write_text("not a key: never used, the inventory only checks it exists\n")
    doc = {"all": {"user": "root", "key": str(tmp_path / "key"), "known_hosts": str(tmp_path / "kh"),
                   "vars": {"venv_path": "/opt/image-venv", **vars}},
           "hosts": {"w1": {"address": "127.0.0.1"}}, "groups": {"workers": {"hosts": ["w1"]}}}
    p = tmp_path / "inv.yml"
    p.write_text(yaml.safe_dump(doc))
    return load_inventory(p, vars_model=vars_model())  # as the tasks load it


def test_provided_mode_builds_nothing_and_checks_the_workers_venv(tmp_path):
    inv = _inv(tmp_path, venv_source="provided", venv_python_version="3.12", venv_verify_packages=["vllm", "torch"])
    m = venv.provided_manifest(inv)
    assert m["provided"] and m["python_version"] == "3.12" and m["digest"] is None
    steps = venv_deploy.steps(inv.hosts["w1"], m)
    assert [type(s).__name__ for s in steps] == ["ProvidedVenv", "Assert"]   # no rsync, no release switch
    assert isinstance(steps[1], Assert) and steps[1].test == "/opt/image-venv/bin/python -c 'import vllm; import torch'"
    assert venv_deploy.steps(inv.hosts["w1"], m, revert=True) == []           # nothing of ours to roll back
    # the env file's CUDA_HOME follows the provided venv's Python
    text = env.content(inv.hosts["w1"], m["python_version"])
    assert "export CUDA_HOME=/opt/image-venv/lib/python3.12/site-packages/nvidia/cu13" in text


def test_provided_mode_needs_the_python_version(tmp_path):
    inv = _inv(tmp_path, venv_source="provided")
    with pytest.raises(UserError, match=r"field 'venv_python_version': venv_source: provided needs"):
        venv.provided_manifest(inv)


@pytest.mark.parametrize("field,value,msg", [
    ("venv_source", "image", "venv_source"), ("venv_python_version", "3.12.3", "venv_python_version"),
    ("skip_roles", "nfs", "skip_roles")])
def test_bad_values_name_the_field(tmp_path, field, value, msg):
    with pytest.raises(InventoryError, match=msg):
        _inv(tmp_path, **{field: value})


def test_skip_roles_are_recorded_and_unknown_names_refused(tmp_path):
    inv = _inv(tmp_path, skip_roles=["nfs", "model"])
    ctx = types.SimpleNamespace(inventory=inv)
    chosen = apply.select("nvidia,nfs,configs")
    assert apply.skipped(inv.hosts["w1"], ctx, chosen) == ["nfs"]       # model is not chosen: not listed
    bad = _inv(tmp_path, skip_roles=["nfs", "nfs-route"])
    with pytest.raises(UserError, match=r"host 'w1', field 'skip_roles': unknown role\(s\) nfs-route"):
        apply.skipped(bad.hosts["w1"], types.SimpleNamespace(inventory=bad), chosen)
