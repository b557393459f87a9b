#!/usr/bin/env python3
"""Run-to-run noise of a collected campaign, lined up with what the machine did (sampler.py).

    python -m testbed.realgpu.noise CAMPAIGN_NODE_DIR SAMPLES.jsonl

Per (configuration, concurrency): the repeats' output tok/s, their mean, the coefficient of variation
(sample sd / mean), and during each run (window [date - duration, date]: vLLM writes `date` when the
run ends, to the second) the median SM clock, the throttle reasons seen and the fixed-loop timings
(sampler.py's CPU-speed record); plus the loop's timing at the start and the end of the record.
Prints a Markdown table (docs/engines-gpu.md quotes it).
"""
from __future__ import annotations

import datetime as dt
import json
import statistics
import sys
from pathlib import Path


def runs(folder: Path) -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = {}
    for f in sorted(folder.glob("*_conc*_r*.json")):
        r = json.loads(f.read_text())
        end = dt.datetime.strptime(r["date"], "%Y%m%d-%H%M%S").replace(tzinfo=dt.timezone.utc).timestamp()
        out.setdefault((r["config"], int(r["max_concurrency"])), []).append(
            {"tok_s": r["output_throughput"], "tpot": r["median_tpot_ms"], "end": end, "start": end - r["duration"]})
    return out


def window(samples: list[dict], start: float, end: float) -> list[dict]:
    return [s for s in samples if start - 1 <= s["t"] <= end + 1]


def cv(xs: list[float]) -> float:
    return statistics.stdev(xs) / statistics.fmean(xs) if len(xs) > 1 else float("nan")


def table(folder: Path, samples: list[dict]) -> str:
    lines = ["| config | conc | runs | output tok/s (each) | mean | CV | SM MHz (median per run) | "
             "throttle reasons | loop ms (in the runs) |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (cfg, conc), rs in sorted(runs(folder).items(), key=lambda kv: (kv[0][1], kv[0][0])):
        toks = [r["tok_s"] for r in rs]
        sm, thr, loop = [], set(), []
        for r in rs:
            w = window(samples, r["start"], r["end"])
            clocks = [s["sm_mhz"] for s in w if s.get("sm_mhz")]
            sm.append(f"{statistics.median(clocks):.0f}" if clocks else "-")
            thr |= {s["throttle"] for s in w if s.get("throttle")}
            loop += [s["loop_ms"] for s in w if "loop_ms" in s]
        lr = f"{min(loop):.1f}-{max(loop):.1f}" if loop else "-"
        lines.append(f"| {cfg} | {conc} | {len(rs)} | {', '.join(f'{t:,.1f}' for t in toks)} | "
                     f"{statistics.fmean(toks):,.1f} | {cv(toks) * 100:.2f} % | {', '.join(sm)} | "
                     f"{', '.join(sorted(thr)) or '-'} | {lr} |")
    loops = [s for s in samples if "loop_ms" in s]
    if loops:
        lines.append("")
        lines.append(f"Fixed loop: {loops[0]['loop_ms']:.1f} ms at the start of the record, {loops[-1]['loop_ms']:.1f} ms at "
                     f"its end ({len(loops)} timings over {(loops[-1]['t'] - loops[0]['t']) / 60:.1f} min, "
                     f"{min(s['loop_ms'] for s in loops):.1f}-{max(s['loop_ms'] for s in loops):.1f} ms).")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    samples = [json.loads(ln) for ln in Path(argv[2]).read_text().splitlines() if ln.strip()]
    print(table(Path(argv[1]), samples))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
