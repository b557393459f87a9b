"""On the accelerator machine only (marker real_gpu; skipped elsewhere with the reason): the carried
payload installs and passes the kernel self-test through device.sh.

    SPECFLEET_REALGPU_CARRY=$PWD/.realgpu/carry python3 -m pytest -m real_gpu tests/real_gpu
"""
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.real_gpu, pytest.mark.timeout(600)]


def test_payload_installs_and_kernels_pass(tmp_path):
    carry = Path(os.environ["SPECFLEET_REALGPU_CARRY"])
    p = subprocess.run(["bash", str(carry / "kit" / "device.sh"), "selftest"], capture_output=True, text=True,
                       env={**os.environ, "CARRY": str(carry), "OUT": str(tmp_path)}, timeout=540)
    text = (tmp_path / "selftest.txt").read_text() if (tmp_path / "selftest.txt").exists() else p.stdout
    assert p.returncode == 0 and "selftest PASSED" in text, text[-2000:]
    assert "NVIDIA" in (tmp_path / "env.txt").read_text()
