#!/usr/bin/env python3
"""The simulated engine's performance model against real H200 runs it was not calibrated on.

The model (testbed/simvllm/vllm/model.py) was set up on the field report's node (RTX PRO 6000,
Qwen3-32B): its acceptance anchors, its prefill fit and bw_eff place vanilla TPOT on the report's.
Here it predicts vanilla TPOT for the real vLLM 0.26.0 runs on one H200 (tests/fixtures/
vllm-0.26.0-cuda-h200: Qwen3-32B and Qwen3-8B shapes with random weights, output 256, 16 prompts,
greedy), with only the public specs changed (H200: 4,800 GB/s, 989 TFLOPS dense BF16; the model's
weights, layers, hidden size and KV bytes per token from its config), and prints predicted vs
measured mean TPOT per concurrency. Nothing is fitted to these files.

    .venv/bin/python benchmarks/sim_out_of_sample.py        # instant
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "testbed/simvllm"))
from vllm import model  # noqa: E402

FIX = ROOT / "tests/fixtures/vllm-0.26.0-cuda-h200"
H200 = {"mem_bw_gbps": 4800.0, "bf16_tflops": 989.0}
SHAPES = {  # weights GiB (the run's server log), layers, hidden, KV bytes/token = layers x 8 x 128 x 2 x 2
    "h200-dummy32b": {"weights_gib": 59.1, "layers": 64, "hidden": 5120, "kv_bytes_per_token": 64 * 8 * 128 * 4},
    "h200-dummy8b": {"weights_gib": 13.7, "layers": 36, "hidden": 4096, "kv_bytes_per_token": 36 * 8 * 128 * 4},
}


def main() -> int:
    for camp, shape in SHAPES.items():
        setup = model.with_setup(**H200, **shape)
        for conc in (1, 16):
            res = json.loads((FIX / camp / "h200" / f"vanilla_conc{conc}.json").read_text())
            got = res["mean_tpot_ms"]
            for mode, prefill in (("wave", False), ("closed-loop", True)):  # one wave of 16: "wave" applies
                pred = model.tpot_ms(model.method("vanilla"), conc, None, 256, setup, prefill=prefill)
                print(f"sim-oos {camp} conc={conc} mode={mode} predicted_tpot_ms={pred:.2f} "
                      f"measured_tpot_ms={got:.2f} error={(pred / got - 1) * 100:+.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
