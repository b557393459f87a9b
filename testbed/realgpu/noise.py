#!/usr/bin/env python3
"""Run-to-run noise of a collected campaign, lined up with what the machine did (sampler.py).

    python -m testbed.realgpu.noise CAMPAIGN_NODE_DIR SAMPLES.jsonl [CAMPAIGN_NODE_DIR SAMPLES.jsonl]

Per (configuration, concurrency): the repeats' output tok/s, their mean, the coefficient of variation
(sample sd / mean), the same for the gate's metric (token-weighted TPOT, gate_policy.token_weighted_tpot),
and during each run (window [date - duration, date]: vLLM writes `date` when the
run ends, to the second) the median SM clock, the throttle reasons seen and the fixed-loop timings
(sampler.py's CPU-speed record); plus the loop's timing at the start and the end of the record.
Across server starts: for a configuration `X` run again as `X-b` (a fresh server start of the
identical configuration, the plan's A B A' design), the ratio of the two starts' means and the CV of
all their runs together. Given two nodes (two machines, each with its own sampler record): each node's
table, then across machines: per (configuration, concurrency) the ratio of node B's mean to node A's with
the interval the gate uses (its per-look confidence, Welch on log values: specfleet.worker.stats), for
output tok/s and the gate's metric. Prints Markdown (docs/engines-gpu.md quotes it).
"""
from __future__ import annotations

import datetime as dt
import json
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from specfleet.report.gates.gate_policy import ALPHA_PER_LOOK, token_weighted_tpot  # noqa: E402
from specfleet.resultfile.schema import Result  # noqa: E402
from specfleet.worker.stats import ratio_interval  # noqa: E402

#: the gate's per-look confidence (two one-sided tests at gate_policy's alpha per look): the report's interval
GATE_CONFIDENCE = 1 - 2 * ALPHA_PER_LOOK


def runs(folder: Path) -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = {}
    for f in sorted(q for q in folder.glob("*_conc*_r*.json") if not q.name.endswith(".record.json")):  # results, not their records
        r = json.loads(f.read_text())
        end = dt.datetime.strptime(r["date"], "%Y%m%d-%H%M%S").replace(tzinfo=dt.timezone.utc).timestamp()
        out.setdefault((r["config"], int(r["max_concurrency"])), []).append(
            {"tok_s": r["output_throughput"], "tpot": r["median_tpot_ms"], "end": end, "start": end - r["duration"],
             "tpot_w": token_weighted_tpot(Result.model_validate(r)) or r["mean_tpot_ms"]})
    return out


def window(samples: list[dict], start: float, end: float) -> list[dict]:
    return [s for s in samples if start - 1 <= s["t"] <= end + 1]


def cv(xs: list[float]) -> float:
    return statistics.stdev(xs) / statistics.fmean(xs) if len(xs) > 1 else float("nan")


def table(folder: Path, samples: list[dict]) -> str:
    lines = ["| config | conc | runs | output tok/s (each) | mean | CV | weighted TPOT ms (mean) | CV | "
             "SM MHz (median per run) | throttle reasons | loop ms (in the runs) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    cells = runs(folder)
    for (cfg, conc), rs in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0])):
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
                     f"{statistics.fmean(toks):,.1f} | {cv(toks) * 100:.2f} % | "
                     f"{statistics.fmean(tw := [r['tpot_w'] for r in rs]):.3f} | {cv(tw) * 100:.2f} % | {', '.join(sm)} | "
                     f"{', '.join(sorted(thr)) or '-'} | {lr} |")
    lines += across_starts(cells)
    loops = [s for s in samples if "loop_ms" in s]
    if loops:
        lines.append("")
        lines.append(f"Fixed loop: {loops[0]['loop_ms']:.1f} ms at the start of the record, {loops[-1]['loop_ms']:.1f} ms at "
                     f"its end ({len(loops)} timings over {(loops[-1]['t'] - loops[0]['t']) / 60:.1f} min, "
                     f"{min(s['loop_ms'] for s in loops):.1f}-{max(s['loop_ms'] for s in loops):.1f} ms).")
    return "\n".join(lines)


def across_starts(cells: dict[tuple[str, int], list[dict]]) -> list[str]:
    """The A B A' design: `X-b` is a fresh server start of configuration `X`."""
    out = []
    for (cfg, conc), rs in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        again = cells.get((f"{cfg}-b", conc))
        if not again:
            continue
        if not out:
            out += ["", "| across server starts | conc | runs | tok/s: 2nd start / 1st | weighted TPOT: 2nd / 1st | "
                    "CV tok/s, all runs | CV weighted TPOT, all runs |", "| --- | --- | --- | --- | --- | --- | --- |"]
        tok = ([r["tok_s"] for r in rs], [r["tok_s"] for r in again])
        tw = ([r["tpot_w"] for r in rs], [r["tpot_w"] for r in again])
        out.append(f"| {cfg} vs {cfg}-b | {conc} | {len(rs)} + {len(again)} | "
                   f"{statistics.fmean(tok[1]) / statistics.fmean(tok[0]):.4f} | "
                   f"{statistics.fmean(tw[1]) / statistics.fmean(tw[0]):.4f} | "
                   f"{cv(tok[0] + tok[1]) * 100:.2f} % | {cv(tw[0] + tw[1]) * 100:.2f} % |")
    return out


def across_machines(a: Path, b: Path, confidence: float = GATE_CONFIDENCE) -> list[str]:
    """Node b (one machine) against node a (another) per (configuration, concurrency): b / a of the means
    and the interval of that ratio, for output tok/s and the gate's metric (token-weighted TPOT)."""
    ca, cb = runs(a), runs(b)
    out = [f"| across machines ({b.name} / {a.name}) | conc | runs | tok/s ratio | {confidence:.1%} CI | "
           f"weighted TPOT ratio | {confidence:.1%} CI |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for (cfg, conc), ra in sorted(ca.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        rb = cb.get((cfg, conc))
        if not rb:
            continue
        cells = []
        for key in ("tok_s", "tpot_w"):
            xa, xb = [r[key] for r in ra], [r[key] for r in rb]
            ri = ratio_interval(xa, xb, confidence)
            cells += [f"{statistics.fmean(xb) / statistics.fmean(xa):.4f}",
                      f"[{ri.low:.4f}, {ri.high:.4f}]" if ri else "-"]
        out.append(f"| {cfg} | {conc} | {len(ra)} + {len(rb)} | {' | '.join(cells)} |")
    return out


def main(argv: list[str]) -> int:
    pairs = [(Path(argv[i]), Path(argv[i + 1])) for i in range(1, len(argv) - 1, 2)]
    for k, (folder, samples_file) in enumerate(pairs):
        samples = [json.loads(ln) for ln in samples_file.read_text().splitlines() if ln.strip()]
        if len(pairs) > 1:
            print(f"{'' if k == 0 else chr(10)}**{folder.name}**{chr(10)}")
        print(table(folder, samples))
    if len(pairs) == 2:
        print()
        print("\n".join(across_machines(pairs[0][0], pairs[1][0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
