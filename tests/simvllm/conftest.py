"""Fixtures for the simulated vLLM: a venv with `pip install testbed/simvllm`, servers on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from simvllm_helpers import BASE_PYTHON, SAMPLE_DATASET, SIMVLLM, Server
from tests.shared_data import SPEC_BENCH

@pytest.fixture(scope="session")
def simvenv(tmp_path_factory) -> Path:
    if not os.path.exists(BASE_PYTHON):
        pytest.skip(f"{BASE_PYTHON} not available")
    venv = tmp_path_factory.mktemp("simvllm") / "venv"
    subprocess.run([BASE_PYTHON, "-m", "venv", str(venv)], check=True)
    build = tmp_path_factory.mktemp("simvllm-src")
    # build from a copy: setuptools writes build/ and *.egg-info next to the sources
    subprocess.run(["cp", "-r", str(SIMVLLM / "pyproject.toml"), str(SIMVLLM / "vllm"), str(build)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(build)], check=True,
                   env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return venv


@pytest.fixture
def model_dir(tmp_path) -> Path:
    d = tmp_path / "models" / "Qwen3-32B"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "hidden_size": 5120, "num_hidden_layers": 64,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 40960, "simvllm": {"weights_gib": 61.03}}))
    (d / "tokenizer_config.json").write_text("{}")
    return d


@pytest.fixture
def gpu_dir(tmp_path) -> Path:
    d = tmp_path / "gpu"
    (d / "reservations").mkdir(parents=True)
    (d / "gpu.json").write_text(json.dumps({"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                                            "memory_total_mib": 97887, "driver_version": "580.173.02",
                                            "cuda_version": "13.0", "uuid": "GPU-test"}))
    (d / "modules").write_text("nvidia\nnvidia_uvm\n")
    return d


@pytest.fixture
def dataset() -> Path:
    shared = SPEC_BENCH
    return SAMPLE_DATASET if SAMPLE_DATASET.exists() else shared


@pytest.fixture
def servers(simvenv, model_dir, tmp_path, gpu_dir):
    started: list[Server] = []

    def start(**kw) -> Server:
        s = Server(simvenv, kw.pop("model", model_dir), tmp_path, kw.pop("gpu", gpu_dir), **kw)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop()


