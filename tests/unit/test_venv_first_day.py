"""The workers' venv build on a first day: a relative requirement or wheelhouse is relative to the
inventory file (as `datasets`), a missing one is refused before pip, and pip's permanent errors are not
retried pip_attempts times (specfleet/venv_build.py, roles/venv.py)."""
from __future__ import annotations

import time

import pytest

from specfleet import venv_build
from specfleet.roles.venv import venv_spec
from specfleet.venv_build import VenvError, build, permanent_pip_error

BASE = {"venv_path": "/opt/v", "base_python": "/usr/bin/python3"}


def test_a_local_requirement_and_the_wheelhouse_are_relative_to_the_inventory_file(tmp_path, monkeypatch):
    inv_dir = tmp_path / "inventory"
    inv_dir.mkdir()
    (tmp_path / "pkgs" / "simvllm").mkdir(parents=True)
    (tmp_path / "wheels").mkdir()
    monkeypatch.chdir("/")  # wherever fab runs
    spec = venv_spec({**BASE, "venv_requirements": ["../pkgs/simvllm", "vllm==0.28.0", "vllm[bench]==0.28.0"],
                      "wheelhouse": "../wheels"}, where="inv.yml: bastion", base=inv_dir)
    assert spec.requirements == [str(tmp_path / "pkgs" / "simvllm"), "vllm==0.28.0", "vllm[bench]==0.28.0"]
    assert spec.wheelhouse == str(tmp_path / "wheels")


def test_a_missing_local_requirement_is_refused_naming_file_and_field(tmp_path):
    with pytest.raises(VenvError) as e:
        venv_spec({**BASE, "venv_requirements": ["vllm==0.28.0", "./nowhere/simvllm"]},
                   where=f"{tmp_path}/hosts.yml: bastion", base=tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path}/hosts.yml: bastion, field 'venv_requirements (entry 2)': ") and "\n" not in msg
    assert f"{tmp_path}/nowhere/simvllm does not exist" in msg and "relative to the inventory file" in msg


def test_permanent_and_transient_pip_errors():
    assert permanent_pip_error("ERROR: No matching distribution found for vlm==0.28.0")
    assert permanent_pip_error("ERROR: Invalid requirement: './x': File './x' does not exist.")
    assert not permanent_pip_error("WARNING: Retrying (Retry(total=2, ...)) after connection broken by "
                                   "'ReadTimeoutError'\nERROR: No matching distribution found for vllm")
    assert not permanent_pip_error("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES")  # not known: retried


@pytest.mark.parametrize("requirement", ["sf-no-such-package==1.0", "{here}/gone.whl"])
def test_pip_is_not_retried_after_a_permanent_error(tmp_path, monkeypatch, requirement):
    monkeypatch.setattr(venv_build, "uv_binary", lambda: None)  # pip's own words
    house = tmp_path / "wheelhouse"
    house.mkdir()
    spec = venv_spec({"venv_path": str(tmp_path / "venv"), "base_python": "/usr/bin/python3", "pip_attempts": 5,
                      "venv_requirements": ["sfdemo==1.0"], "wheelhouse": str(house)})
    spec.requirements = [requirement.format(here=tmp_path)]  # past venv_spec's check: pip's own refusal
    logs: list[str] = []
    t0 = time.monotonic()
    with pytest.raises(VenvError) as e:
        build(spec, log=logs.append)
    assert "not retried" in str(e.value), e.value
    assert not [m for m in logs if "retrying" in m], logs  # one pip run; 5 would wait 1+2+4+8 s between them
    assert time.monotonic() - t0 < 60
