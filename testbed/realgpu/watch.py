#!/usr/bin/env python3
"""The runner's phases, timed from outside, and the device run's summary. Stdlib only.

    watch.py STATE_JSON PHASES_JSON        # device: poll the runner's state every 0.1 s
    watch.py --summary WORK_DIR [PHASES]   # device or here: items, results, per-item cost

The runner's state.json records times to the second; the runner's own cost per item (what is
neither vLLM loading nor benchmarking: preflight before the server starts, stop until the GPU
memory is free) must stay under COST_TARGET_S, so it is timed here to 0.1 s from the state's
status changes: preflight -> loading -> benchmarking -> stopping -> done.
"""
from __future__ import annotations

import glob
import json
import os
import signal
import sys
import time

POLL_S = 0.1
COST_TARGET_S = 3.0
RESULT_COLS = ("completed", "failed", "output_throughput", "median_tpot_ms", "median_ttft_ms",
               "spec_decode_acceptance_length", "spec_decode_acceptance_rate")


def changes(state: dict) -> list[tuple[str, str, str]]:
    """(item, status, phase) of every item of a runner state."""
    return [(i.get("name", ""), i.get("status", ""), i.get("phase", "")) for i in state.get("items", [])]


def watch(state_path: str, out_path: str, poll_s: float = POLL_S) -> None:
    try:
        with open(out_path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    events = doc.setdefault(state_path, [])
    seen: dict[str, tuple[str, str]] = {}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))

    def save() -> None:
        tmp = out_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, out_path)

    while not stop:
        try:
            with open(state_path) as f:
                st = json.load(f)
        except (OSError, ValueError):
            st = None
        if st:
            t = time.time()
            new = False
            for name, status, phase in changes(st):
                if seen.get(name) != (status, phase):
                    seen[name] = (status, phase)
                    events.append({"t": round(t, 2), "item": name, "status": status, "phase": phase})
                    new = True
            if new:
                save()
        time.sleep(poll_s)
    save()


def durations(events: list[dict]) -> dict[str, dict[str, float]]:
    """Seconds each item spent in each status (from one status change to the next of that item;
    the last status of an item gets no duration)."""
    by_item: dict[str, list[dict]] = {}
    for e in events:
        by_item.setdefault(e["item"], []).append(e)
    out: dict[str, dict[str, float]] = {}
    for item, evs in by_item.items():
        evs = sorted(evs, key=lambda e: e["t"])
        d: dict[str, float] = {}
        for a, b in zip(evs, evs[1:]):  # a phase change within a status adds to that status
            d[a["status"]] = round(d.get(a["status"], 0.0) + b["t"] - a["t"], 2)
        out[item] = d
    return out


def preflight_s(d: dict[str, float]) -> float | None:
    """Seconds of preflight; an item seen going from pending straight to loading had a preflight
    shorter than one poll, counted as POLL_S (an upper bound); None when the item never loaded."""
    if "preflight" in d:
        return d["preflight"]
    return POLL_S if "loading" in d else None


def runner_cost(d: dict[str, float]) -> float | None:
    """The runner's own seconds of one item: preflight + stopping (None if either is unknown)."""
    pre = preflight_s(d)
    if pre is None or "stopping" not in d:
        return None
    return round(pre + d["stopping"], 2)


def summary(work: str, phases: str | None = None) -> list[str]:
    lines = []
    ev: dict = {}
    if phases and os.path.isfile(phases):
        with open(phases) as f:
            ev = json.load(f)
    found = glob.glob(os.path.join(work, "*", "*", "state.json"))      # WORK/campaign/node
    found += glob.glob(os.path.join(work, "*", "*", "*", "state.json"))  # WORK/gpuN/campaign/node (pair)
    for sp in sorted(found):
        with open(sp) as f:
            st = json.load(f)
        lines.append(f"campaign {st.get('campaign')} status {st.get('status')} vllm {st.get('vllm_version')} "
                     f"error {st.get('error')}")
        d = durations(ev.get(sp, []))
        for it in st.get("items", []):
            di = d.get(it["name"], {})
            cost = runner_cost(di)
            timing = " ".join(f"{k} {v:.1f}s" for k, v in di.items())
            verdict = "" if cost is None else (f"; runner cost {cost:.1f}s "
                                               f"({'under' if cost < COST_TARGET_S else 'OVER'} {COST_TARGET_S:g}s)")
            lines.append(f"  item {it['name']}: {it['status']} attempts {it.get('attempts')} "
                         f"{(it.get('error') or '')[:300]} {timing}{verdict}".rstrip())
        lines.append("  " + "file".ljust(26) + "".join(c.replace("spec_decode_", "sd_")[:14].rjust(15)
                                                       for c in RESULT_COLS))
        for f in sorted(g for g in glob.glob(os.path.join(os.path.dirname(sp), "*_conc*.json"))
                       if not g.endswith(".record.json")):  # results, not their run records
            with open(f) as fh:
                r = json.load(fh)
            vals = [r.get(c) for c in RESULT_COLS]
            lines.append("  " + os.path.basename(f).ljust(26) + "".join(
                (f"{v:15.2f}" if isinstance(v, float) else str(v).rjust(15)) for v in vals))
    return lines or [f"no runner state under {work}"]


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--summary" and len(argv) in (2, 3):
        print("\n".join(summary(argv[1], argv[2] if len(argv) == 3 else None)))
        return 0
    if len(argv) == 2:
        watch(argv[0], argv[1])
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
