#!/usr/bin/env python3
"""What the machine did while a campaign ran: one JSON line every PERIOD_S seconds.

    python3 sampler.py OUT.jsonl [PERIOD_S]

Each line: `t` (unix seconds), the GPU's SM and memory clocks (MHz), utilisation and active throttle
reasons as nvidia-smi reports them (null without nvidia-smi), and every LOOP_EVERY-th line `loop_ms`:
the wall time of one fixed pure-Python loop (LOOP_N additions), the CPU-speed record (the vCPUs of
the lent machine ran the same loop in 1.6 to 9.5 ms: docs/engines-gpu.md). stdlib only; runs detached
(fleet.sh starts it with setsid) until killed or the machine goes back. testbed/realgpu/noise.py
lines it up with the runs.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

QUERY = "clocks.sm,clocks.mem,utilization.gpu,clocks_throttle_reasons.active,temperature.gpu,power.draw"
LOOP_N = 200_000
LOOP_EVERY = 5


def fixed_loop_ms(n: int = LOOP_N) -> float:
    t = time.perf_counter()
    s = 0
    for i in range(n):
        s += i
    return round((time.perf_counter() - t) * 1000, 3)


def gpu() -> dict:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if not out:
        return {}
    vals = [v.strip() for v in out[0].split(",")]
    keys = ("sm_mhz", "mem_mhz", "util_pct", "throttle", "temp_c", "power_w")
    rec = {}
    for k, v in zip(keys, vals):
        try:
            rec[k] = v if k == "throttle" else float(v)
        except ValueError:
            rec[k] = None
    return rec


def main(argv: list[str]) -> int:
    out, period = argv[1], float(argv[2]) if len(argv) > 2 else 2.0
    n = 0
    with open(out, "a", buffering=1) as f:
        while True:
            rec = {"t": round(time.time(), 2), **gpu()}
            if n % LOOP_EVERY == 0:
                rec["loop_ms"] = fixed_loop_ms()
            f.write(json.dumps(rec) + "\n")
            n += 1
            time.sleep(period)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
