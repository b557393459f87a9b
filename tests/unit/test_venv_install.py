"""The bastion venv from a wheelhouse: uv installs it when uv is there (every wheel is local), pip otherwise."""
from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from specfleet import venv_build
from specfleet.roles.venv import venv_spec
from specfleet.venv_build import VenvSpec, build, install_argv, read_manifest


def wheel(wheelhouse: Path, name: str = "sfdemo", version: str = "1.0") -> None:
    """A minimal pure-Python wheel: one module and its dist-info."""
    files = {f"{name}.py": "VALUE = 42\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    rec = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rec.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{name}-{version}.dist-info/RECORD"] = "\n".join(rec + [f"{name}-{version}.dist-info/RECORD,,"]) + "\n"
    with zipfile.ZipFile(wheelhouse / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)


def spec(tmp_path: Path, wheelhouse: Path | None) -> VenvSpec:
    return venv_spec({"venv_path": str(tmp_path / "venv"), "base_python": "/usr/bin/python3",
                      "venv_requirements": ["sfdemo==1.0"], "venv_verify_packages": ["sfdemo"],
                      "wheelhouse": str(wheelhouse) if wheelhouse else None, "pip_attempts": 1})


def test_a_wheelhouse_install_uses_uv_when_it_is_there_and_pip_otherwise(tmp_path, monkeypatch):
    if not venv_build.uv_binary():
        pytest.skip("uv is not installed (the test extra installs it)")
    assert Path(install_argv(spec(tmp_path, tmp_path))[0]).name == "uv"
    assert install_argv(spec(tmp_path, None))[0].endswith("/bin/pip")  # an index: pip and its configuration
    monkeypatch.setattr(venv_build, "uv_binary", lambda: None)
    assert install_argv(spec(tmp_path, tmp_path))[0].endswith("/bin/pip")


@pytest.mark.parametrize("with_uv", [True, False])
def test_the_venv_built_from_a_wheelhouse_imports_its_packages(tmp_path, monkeypatch, with_uv):
    if with_uv and not venv_build.uv_binary():
        pytest.skip("uv is not installed (the test extra installs it)")
    if not with_uv:
        monkeypatch.setattr(venv_build, "uv_binary", lambda: None)
    house = tmp_path / "wheelhouse"
    house.mkdir()
    wheel(house)
    out = build(spec(tmp_path, house), log=lambda m: None)
    assert out.changed and read_manifest(str(tmp_path / "venv"))["digest"] == spec(tmp_path, house).digest()
    assert (tmp_path / "venv/bin/pip").exists()  # pip stays in the venv (the fix-ups uninstall with it)


def test_inventory_vars_set_the_spec_and_unset_ones_take_the_vars_models_defaults():
    base = {"venv_path": "/opt/v", "base_python": "/usr/bin/python3", "venv_requirements": ["vllm==0.32.0"]}
    plain = venv_spec({**base, "pip_timeout": None})  # an inventory var left unset reads as None
    assert (plain.pip_timeout, plain.pip_retries, plain.attempts, plain.verify_packages, plain.wheelhouse) == \
        (30, 3, 5, ["vllm"], None)
    tuned = venv_spec({**base, "pip_timeout": 5, "pip_retries": 0, "pip_attempts": 2,
                                "venv_verify_packages": ["vllm", "torch"], "wheelhouse": "/srv/wh"})
    assert (tuned.pip_timeout, tuned.pip_retries, tuned.attempts, tuned.verify_packages, tuned.wheelhouse) == \
        (5, 0, 2, ["vllm", "torch"], "/srv/wh")
