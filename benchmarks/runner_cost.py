#!/usr/bin/env python3
"""The runner's own cost per item on the real GPU: what is neither vLLM loading nor benchmarking.

Reads the phase timings that testbed/realgpu/watch.py took on the device (0.1 s polls of the
runner's state.json; default: the committed device run, tests/fixtures/vllm-0.26.0-cuda-h200-specfleet/
phases.json) and prints, per campaign and item, the seconds spent in preflight (GPU-memory gate,
port, model, venv, env file, engine version from package metadata, prompt-length check), loading
(vLLM start to healthy: not the runner's), benchmarking (not the runner's) and stopping (SIGTERM to
GPU memory free, through the nvidia-smi gate). Runner cost = preflight + stopping; target under
watch.COST_TARGET_S (3 s). Last line: `runner cost per item, device, worst: X s`.

    .venv/bin/python benchmarks/runner_cost.py [--phases PHASES_JSON]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from testbed.realgpu import watch  # noqa: E402

DEFAULT = REPO / "tests" / "fixtures" / "vllm-0.26.0-cuda-h200-specfleet" / "phases.json"
COLS = ("preflight", "loading", "benchmarking", "stopping")


def rows(phases: dict) -> list[tuple[str, str, dict, float | None]]:
    out = []
    for state, events in sorted(phases.items()):
        campaign = Path(state).parent.parent.name
        for item, d in watch.durations(events).items():
            out.append((campaign, item, d, watch.runner_cost(d)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", default=str(DEFAULT))
    a = ap.parse_args(argv)
    got = rows(json.loads(Path(a.phases).read_text()))
    if not got:
        print(f"{a.phases}: no item timings")
        return 1
    print(f"{'campaign':<14} {'item':<16}" + "".join(f"{c:>14}" for c in COLS) + f"{'runner cost':>14}")
    for campaign, item, d, cost in got:
        # a preflight shorter than the watcher's 0.1 s poll is not seen: shown as <0.1s, counted as 0.1 s
        cells = "".join(f"{d[c]:>13.1f}s" if c in d else
                        (f"{'<' + str(watch.POLL_S) + 's':>14}" if c == "preflight" and cost is not None else f"{'-':>14}")
                        for c in COLS)
        verdict = "-" if cost is None else f"{cost:.1f}s {'ok' if cost < watch.COST_TARGET_S else 'OVER'}"
        print(f"{campaign:<14} {item:<16}{cells}{verdict:>14}")
    costs = [c for *_, c in got if c is not None]
    worst = max(costs) if costs else float("nan")
    print(f"target: under {watch.COST_TARGET_S:g} s per item; source {a.phases}")
    print(f"runner cost per item, device, worst: {worst:.1f} s")
    return 0 if costs and worst < watch.COST_TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
