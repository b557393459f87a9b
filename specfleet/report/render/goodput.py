"""Goodput under the plan's SLO (benchmark.slo, specfleet/plan/slo.py), per bench cell: the columns
goodput_req_s, slo_attainment_pct, meets_slo, goodput_speedup, vllm_goodput_req_s (docs/slo.md says
what each is). A request is good when it succeeded and meets every limit (vLLM's rule), read from the
result's per-request arrays (--save-detailed; a request's latency is its TTFT plus its ITLs where the
file has no `latencies`, as vLLM 0.26-0.29 write it); a run without them has no goodput (NaN), never
zero, and the report says why (worker/crossover.why_no_goodput). A speedup at the SLO is a ratio of
goodputs where both sides meet the SLO: elsewhere the report says which side misses it and the highest
load each meets; every speedup shown carries the row's flags (acceptance DEGENERATE / NEAR-ZERO,
tail-dominated).
"""
from __future__ import annotations

import math
import statistics

import pandas as pd

from ...plan.slo import Slo
from ...worker.crossover import good_requests as count_good, why_no_goodput
from ..scan.folder import CollectedFolder, Run
from ..tables.conclusions import tail_dominated
from ..tables.measures import ACCEPTANCE_FLAGS

TAIL = "TAIL-DOMINATED"

def good_requests(run: Run, slo: Slo) -> tuple[int, int] | None:
    """(good, succeeded) of one run, or None when its per-request arrays are missing or uneven (the
    rule is the worker's, which the goodput crossover search applies on the node)."""
    res = run.result
    return count_good(res.ttfts, res.latencies, res.output_lens, res.errors, slo.limits(), res.itls)


def why_not(run: Run) -> str | None:
    """Why one run has no goodput (None: it has one)."""
    res = run.result
    return why_no_goodput({k: getattr(res, k) for k in ("ttfts", "latencies", "itls", "output_lens", "errors")})


def add_goodput(camp: CollectedFolder, runs: pd.DataFrame, baseline: str, slo: Slo | None) -> pd.DataFrame:
    """The merged rows with the columns above added (nothing added without an SLO)."""
    if slo is None or runs.empty:
        return runs
    groups = camp.groups()
    gp, att, vg, why = [], [], [], []
    for _, row in runs.iterrows():
        rs = groups.get((row.cell, row.config, row.node), [])
        counted = [(r, g) for r in rs if (g := good_requests(r, slo)) is not None]
        why.append(next((w for r in rs if (w := why_not(r))), None if rs else "no run"))
        if not counted or len(counted) < len(rs):
            gp.append(math.nan), att.append(math.nan)
        else:
            gp.append(statistics.fmean(g[0] / r.result.duration for r, g in counted))
            ok = sum(g[1] for _, g in counted)
            att.append(100.0 * sum(g[0] for _, g in counted) / ok if ok else math.nan)
        own = [r.result.request_goodput for r in rs if r.result.request_goodput is not None]
        vg.append(statistics.fmean(own) if own else math.nan)
    out = runs.copy()
    out["goodput_req_s"], out["slo_attainment_pct"], out["vllm_goodput_req_s"] = gp, att, vg
    # why a cell has no goodput, for slo_lines: kept out of the columns (merged.json's schema)
    out.attrs["goodput_missing"] = {(c, n, cell): w for c, n, cell, w in zip(out.config, out.node, out.cell, why) if w}
    out["meets_slo"] = [None if math.isnan(a) else a >= slo.attainment_pct for a in att]
    base = out[out.config == baseline].set_index(["node", "cell"])
    sp, base_meets, flags = [], [], []
    for _, r in out.iterrows():
        b = base.loc[(r.node, r.cell)] if (r.node, r.cell) in base.index else None
        bm = None if b is None else b.meets_slo
        base_meets.append(bm)
        both = _yes(r.meets_slo) and _yes(bm) and b.goodput_req_s > 0   # a speedup only at the SLO
        sp.append(r.goodput_req_s / b.goodput_req_s if both else math.nan)
        flags.append(", ".join(row_flags(r, b)) if both else "")
    out["baseline_meets_slo"], out["goodput_speedup"], out["goodput_flags"] = base_meets, sp, flags
    return out


def _yes(v) -> bool:
    """meets_slo is True / False (numpy's too) or None (not recorded)."""
    return v is not None and v == v and bool(v)


def row_flags(r: pd.Series, b: pd.Series | None) -> list[str]:
    """What a speedup of this row is not: its acceptance flag (measures.acceptance_flag), and
    tail-dominated (conclusions.tail_dominated) against its baseline row."""
    out = [r.acceptance_flag] if r.get("acceptance_flag") in ACCEPTANCE_FLAGS else []
    if b is not None and r.config != b.config and tail_dominated(r, b):
        out.append(TAIL)
    return out


def speedup_text(r: pd.Series) -> str:
    """A speedup at the SLO with its flags, or why there is none."""
    if r.goodput_speedup == r.goodput_speedup:
        f = r.get("goodput_flags") or ""
        return f"{r.goodput_speedup:.2f}x" + (f" ({f}: not a speedup)" if any(a in f for a in ACCEPTANCE_FLAGS)
                                               else f" ({f})" if f else "")
    if r.meets_slo is None or r.baseline_meets_slo is None or r.meets_slo != r.meets_slo:
        return "–"
    if not _yes(r.meets_slo) and not _yes(r.baseline_meets_slo):
        return "neither meets the SLO"
    return "baseline misses the SLO" if _yes(r.meets_slo) else "misses the SLO"


def highest_meeting(runs: pd.DataFrame) -> dict[tuple[str, str], int | None]:
    """(config, node) -> the highest concurrency measured whose cell meets the SLO (None: none does).
    Only plain concurrency cells (a sweep's cells differ in more than the load)."""
    out: dict[tuple[str, str], int | None] = {}
    if "meets_slo" not in runs:
        return out
    plain = runs[runs.cell == "conc" + runs.concurrency.astype(str)]
    for (cfg, node), g in plain.groupby(["config", "node"], sort=False):
        ok = g[g.meets_slo == True]  # noqa: E712 (None = not recorded)
        out[(cfg, node)] = int(ok.concurrency.max()) if not ok.empty else None
    return out


def slo_lines(runs: pd.DataFrame, baseline: str, slo: Slo) -> list[str]:
    """The report's words: per configuration the speedup at the SLO and the highest load meeting it."""
    if "goodput_req_s" not in runs:
        return []
    out = [f"SLO: {slo.describe()}; a cell meets it when >= {slo.attainment_pct:g} % of its requests are good "
           "(goodput = good requests / duration, from the per-request arrays)."]
    missing = runs.attrs.get("goodput_missing", {})
    if runs.goodput_req_s.isna().all():
        return out + [f"Goodput not recorded: {'; '.join(dict.fromkeys(missing.values())) or 'not measured'}."]
    for (cfg, node, cell), why in missing.items():
        out.append(f"{cfg} on {node} at {cell}: goodput not recorded: {why}.")
    tops = highest_meeting(runs)
    for (cfg, node), conc in tops.items():
        at = "no concurrency measured meets it" if conc is None else f"highest concurrency meeting it: {conc}"
        mine = runs[(runs.config == cfg) & (runs.node == node)]
        sp = mine[mine.goodput_speedup.notna()]
        if cfg == baseline or mine.baseline_meets_slo.isna().all():
            speed = ""
        elif not sp.empty:
            speed = "; goodput vs the baseline where both meet the SLO: " + ", ".join(
                f"{speedup_text(r)} at {r.cell}" for _, r in sp.iterrows())
        else:
            bt = tops.get((baseline, node))
            speed = ("; neither it nor the baseline meets the SLO at any load measured: no speedup at the SLO"
                     if conc is None and bt is None else
                     f"; no cell where both meet the SLO, so no speedup at the SLO: the highest load each meets is "
                     f"{conc if conc is not None else 'none'} ({cfg}) and {bt if bt is not None else 'none'} ({baseline})")
        out.append(f"{cfg} on {node}: {at}{speed}.")
    for _, r in runs.iterrows():
        own, ours = r.vllm_goodput_req_s, r.goodput_req_s
        if own == own and ours == ours and ours and abs(own / ours - 1) > 0.01:
            out.append(f"{r.config} on {r.node} at {r.cell}: vLLM's request_goodput {own:.3f} req/s differs from "
                       f"the arrays' {ours:.3f} req/s (another SLO passed to --goodput?)")
    return out


def slo_rows(runs: pd.DataFrame) -> list[list[str]]:
    from .document import fmt
    if "goodput_req_s" not in runs:
        return []
    return [[r.config, str(r.concurrency), r.cell, r.node, fmt(r.goodput_req_s, 3), fmt(r.slo_attainment_pct, 1, " %"),
             "–" if r.meets_slo is None else ("yes" if r.meets_slo else "NO"), speedup_text(r),
             fmt(r.vllm_goodput_req_s, 3)] for _, r in runs.iterrows()]


SLO_HEADERS = ["config", "conc", "cell", "node", "goodput req/s", "requests within SLO", "meets SLO",
               "goodput vs baseline", "vLLM request_goodput"]
