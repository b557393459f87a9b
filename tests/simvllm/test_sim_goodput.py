"""The simulated bench's --goodput follows vLLM's rule, so the report's goodput (from the arrays) and the
result's request_goodput agree on the testbed."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

SIMVLLM = Path(__file__).resolve().parents[2] / "testbed" / "simvllm"


@pytest.fixture
def serve():
    sys.path.insert(0, str(SIMVLLM))
    try:
        yield importlib.import_module("vllm.bench.serve")
    finally:
        sys.path.remove(str(SIMVLLM))
        for m in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[m]


def test_request_goodput(serve):
    # TPOTs 40 ms, 60 ms, one-token answer (TPOT 0), a failed request; TTFT 100 ms
    result = {"ttfts": [0.1, 0.1, 0.1, 0.1], "latencies": [0.1 + 10 * 0.04, 0.1 + 10 * 0.06, 0.1, 0.0],
              "output_lens": [11, 11, 1, 0], "errors": ["", "", "", "boom"], "duration": 2.0}
    assert serve.request_goodput(["tpot:50"], result) == 2 / 2.0
    assert serve.request_goodput(["tpot:50", "ttft:90"], result) == 0.0
    assert serve.request_goodput(["e2el:1000"], result) == 3 / 2.0
    with pytest.raises(ValueError, match="should be one of"):
        serve.request_goodput(["itl:5"], result)
