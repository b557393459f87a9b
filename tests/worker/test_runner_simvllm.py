"""The runner against the simulated vLLM (testbed/simvllm) installed in a temporary venv."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SIMVLLM = REPO / "testbed" / "simvllm"
SAMPLE = REPO / "datasets" / "sample" / "question.jsonl"
BASE_PYTHON = "/usr/bin/python3.11"


@pytest.fixture(scope="module")
def simvenv(tmp_path_factory):
    if not (os.path.exists(BASE_PYTHON) and (SIMVLLM / "pyproject.toml").exists() and SAMPLE.exists()):
        pytest.skip("needs /usr/bin/python3.11, testbed/simvllm and datasets/sample")
    venv = tmp_path_factory.mktemp("simvllm") / "venv"
    subprocess.run([BASE_PYTHON, "-m", "venv", str(venv)], check=True)
    src = tmp_path_factory.mktemp("simvllm-src")
    shutil.copy(SIMVLLM / "pyproject.toml", src)
    shutil.copytree(SIMVLLM / "vllm", src / "vllm")
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(src)], check=True,
                   env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return venv


@pytest.fixture
def simbed(bed, simvenv, monkeypatch):
    shutil.rmtree(bed.venv)
    bed.venv = simvenv
    (bed.gpu / "modules").write_text("nvidia\nnvidia_uvm\n")
    (bed.gpu / "gpu.json").write_text(json.dumps({
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "memory_total_mib": 97887,
        "driver_version": "580.173.02", "cuda_version": "13.0", "uuid": "GPU-test"}))
    (bed.model / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "hidden_size": 5120, "num_hidden_layers": 64,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 40960, "simvllm": {"weights_gib": 61.03}}))
    (bed.model / "tokenizer_config.json").write_text("{}")
    bed.dataset = SAMPLE
    monkeypatch.setenv("SIMVLLM_GPU_DIR", str(bed.gpu))
    monkeypatch.setenv("SIMVLLM_TIME_SCALE", "0.002")
    monkeypatch.setenv("SIMVLLM_LOAD_SCALE", "0.002")
    monkeypatch.setenv("SIMVLLM_HOST_CONFIG", str(bed.tmp / "sim.json"))
    return bed


def sim_fault(bed, fault):
    (bed.tmp / "sim.json").write_text(json.dumps({"speed_factor": 1.0, "noise": 0.0, "fault": fault}))


def test_simvllm_campaign(simbed):
    sim_fault(simbed, None)
    rc = simbed.run(simbed.spec(simbed.plan(), queue=["vanilla", "eagle3"]), timeout=240)
    assert rc == 0, simbed.log()
    for cfg in ("vanilla", "eagle3"):
        for conc in (1, 16):
            res = json.loads((simbed.run_dir / f"{cfg}_conc{conc}.json").read_text())
            assert res["simulated"] is True and res["config"] == cfg and res["max_concurrency"] == conc
            assert res["vllm_version"] == "simvllm 1.0 (simulated vLLM)" and res["completed"] == 16
    assert simbed.gpu_used() == 0


def test_simvllm_leave_enginecore(simbed):
    sim_fault(simbed, "leave-enginecore")
    rc = simbed.run(simbed.spec(simbed.plan(), queue=["vanilla", "ngram"]), timeout=240)
    assert rc == 0, simbed.log()
    assert all(i["status"] == "done" for i in simbed.items().values())
    assert simbed.gpu_used() == 0
