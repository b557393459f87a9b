"""The real-GPU tier's tests (docs/engines-gpu.md).

Most tests here run anywhere (CI has no GPU): the payload builder's logic on small inputs, the
pins, manifests and budgets, the self-test's verdict logic, the specs and their provenance stamp,
and specfleet's report on the real CUDA result files in tests/fixtures/vllm-0.26.0-cuda-h200*.
Tests marked `real_gpu` need the device itself (an NVIDIA GPU, nvidia-smi, and the payload's
carry folder in SPECFLEET_REALGPU_CARRY): they are skipped, with that reason, everywhere else.
"""
import os
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CUDA_FIXTURES = FIXTURES / "vllm-0.26.0-cuda-h200"


def pytest_configure(config):
    config.addinivalue_line("markers", "real_gpu: needs the accelerator machine (NVIDIA GPU + payload)")


def device_skip_reason() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi: not the accelerator machine (run these there, see docs/engines-gpu.md)"
    carry = os.environ.get("SPECFLEET_REALGPU_CARRY")
    if not carry or not (Path(carry) / "MANIFEST.sha256").is_file():
        return "SPECFLEET_REALGPU_CARRY does not name a payload carry folder with MANIFEST.sha256"
    return None


def pytest_collection_modifyitems(config, items):
    reason = device_skip_reason()
    if reason is None:
        return
    for item in items:
        if item.get_closest_marker("real_gpu") is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
