"""Goodput under the plan's SLO (benchmark.slo, specfleet/plan/slo.py), per bench cell: the columns
goodput_req_s, slo_attainment_pct, meets_slo, goodput_speedup, vllm_goodput_req_s (docs/slo.md says
what each is). A request is good when it succeeded and meets every limit (vLLM's rule), read from the
result's per-request arrays (--save-detailed; a request's latency is its TTFT plus its ITLs where the
file has no `latencies`, as vLLM 0.26-0.29 write it); a run without them has no goodput (NaN), never
zero, and the report says why (worker/crossover.why_no_goodput).
"""
from __future__ import annotations

import math
import statistics

import pandas as pd

from ...plan.slo import Slo
from ...worker.crossover import good_requests as count_good, why_no_goodput
from ..scan.folder import Campaign, Run

def good_requests(run: Run, slo: Slo) -> tuple[int, int] | None:
    """(good, succeeded) of one run, or None when its per-request arrays are missing or uneven (the
    rule is the worker's, which the goodput crossover search applies on the node)."""
    res = run.result
    return count_good(res.ttfts, res.latencies, res.output_lens, res.errors, slo.limits(), res.itls)


def why_not(run: Run) -> str | None:
    """Why one run has no goodput (None: it has one)."""
    res = run.result
    return why_no_goodput({k: getattr(res, k) for k in ("ttfts", "latencies", "itls", "output_lens", "errors")})


def add_goodput(camp: Campaign, runs: pd.DataFrame, baseline: str, slo: Slo | None) -> pd.DataFrame:
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
    base = out[out.config == baseline].set_index(["node", "cell"])["goodput_req_s"]
    out["goodput_speedup"] = [g / b if (b := base.get((n, c), math.nan)) and b == b and b > 0 else math.nan
                              for n, c, g in zip(out.node, out.cell, out.goodput_req_s)]
    return out


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
    for (cfg, node), conc in highest_meeting(runs).items():
        at = "no concurrency measured meets it" if conc is None else f"highest concurrency meeting it: {conc}"
        sp = runs[(runs.config == cfg) & (runs.node == node) & runs.goodput_speedup.notna()]
        speed = "" if cfg == baseline or sp.empty else "; goodput vs the baseline: " + ", ".join(
            f"{r.goodput_speedup:.2f}x at {r.cell}" for _, r in sp.iterrows())
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
             "–" if r.meets_slo is None else ("yes" if r.meets_slo else "NO"), fmt(r.goodput_speedup, 2, "x"),
             fmt(r.vllm_goodput_req_s, 3)] for _, r in runs.iterrows()]


SLO_HEADERS = ["config", "conc", "cell", "node", "goodput req/s", "requests within SLO", "meets SLO",
               "goodput vs baseline", "vLLM request_goodput"]
