"""venv_fixups names a module on the bastion's path (the CPU-vLLM fix-ups live in testbed/, not the package)."""
from __future__ import annotations

import sys

import pytest

from specfleet.roles.venv import venv_spec
from specfleet.venv_build import VenvError, fixup_module


def spec(fixups):
    return venv_spec({"venv_path": "/opt/v", "base_python": "/usr/bin/python3", "venv_requirements": ["x"],
                      "venv_fixups": fixups})


def test_the_fixup_module_is_imported_by_name_and_its_content_is_in_the_digest(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = tmp_path / "my_fixups.py"
    mod.write_text("def post_install_fixups(venv):\n    return []\n")
    before = spec("my_fixups").digest()
    assert before != spec(None).digest()
    sys.modules.pop("my_fixups", None)
    mod.write_text("def post_install_fixups(venv):\n    return ['changed']\n")
    assert spec("my_fixups").digest() != before  # a changed fix-up rebuilds the venv
    sys.modules.pop("my_fixups", None)


def test_a_missing_or_wrong_fixup_module_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(VenvError, match="venv_fixups: cannot import 'no_such_fixups'"):
        fixup_module("no_such_fixups")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "not_fixups.py").write_text("X = 1\n")
    with pytest.raises(VenvError, match="has no post_install_fixups"):
        fixup_module("not_fixups")
    sys.modules.pop("not_fixups", None)


def test_the_cpu_vllm_fixups_load_from_the_checkout():
    mod = fixup_module("testbed.realvllm.build_venv")
    assert mod.FIXUP_REVISION and callable(mod.post_install_fixups)
