"""`fab compare` on goodput and SLO attainment per bench cell, when both campaigns' plans have
`benchmark.slo` (docs/compare.md, "Goodput under the SLO"). One SLO judges both sides, the
candidate's: goodput comes from the per-request arrays, so the baseline's requests can be judged by
it too. A run with goodput 0 has no log value: such a cell is judged on its SLO attainment.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..plan.slo import Slo
from ..worker.stats import wilson_interval
from .campaign import Campaign
from .compare_rules import REGRESSION, decide, difference_verdict
from .measures import NoiseBand
from .goodput import good_requests

GOODPUT = "goodput_req_s"
ZERO_METHOD = ("goodput 0 in a run (no log value, no ratio interval): judged on SLO attainment, "
               "Newcombe's score interval")


def proportion_difference(k1: int, n1: int, k2: int, n2: int, confidence: float) -> tuple[float, float, float]:
    """k2/n2 - k1/n1 with Newcombe's hybrid score interval (1998, method 10: built from the two Wilson
    intervals; defined when a side is 0 % or 100 %). Treats the n trials of a side as independent."""
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson_interval(k1, n1, confidence)
    l2, u2 = wilson_interval(k2, n2, confidence)
    d = p2 - p1
    return d, d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2), d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)


@dataclass
class GoodputDiff:
    config: str
    cell: str
    concurrency: int
    base_goodput: float          # req/s, mean over runs
    cand_goodput: float
    n_base: int                  # runs
    n_cand: int
    ratio: float | None          # candidate / baseline goodput; None when the baseline's is 0
    ci_low: float | None
    ci_high: float | None
    method: str
    verdict: str                 # goodput's (attainment's when a run's goodput is 0)
    base_attainment_pct: float
    cand_attainment_pct: float
    base_requests: int           # completed requests, pooled over runs
    cand_requests: int
    attainment_change_pp: float
    attainment_low_pp: float
    attainment_high_pp: float
    attainment_verdict: str
    base_meets: bool
    cand_meets: bool

    @property
    def regressed(self) -> bool:
        return REGRESSION in (self.verdict, self.attainment_verdict)


def plan_slo(plan: dict | None) -> Slo | None:
    raw = ((plan or {}).get("benchmark") or {}).get("slo")
    return Slo.model_validate(raw) if raw else None


def _per_run(camp: Campaign, slo: Slo) -> dict[tuple[str, str], list[tuple[float, int, int]]]:
    """(config, cell) -> (goodput, good, completed) per run with per-request arrays."""
    out: dict[tuple[str, str], list[tuple[float, int, int]]] = {}
    for r in camp.runs:
        if (g := good_requests(r, slo)) is not None and r.result.duration:
            out.setdefault((r.config, r.cell), []).append((g[0] / r.result.duration, g[0], g[1]))
    return out


def goodput_diffs(base_camp: Campaign, cand_camp: Campaign, slo: Slo, noise: NoiseBand,
                  conc: dict[str, int]) -> tuple[list[GoodputDiff], list[str]]:
    """Per cell in both campaigns with per-request arrays on both sides; notes for the cells without."""
    pa, pb = _per_run(base_camp, slo), _per_run(cand_camp, slo)
    both = {(r.config, r.cell) for r in base_camp.runs} & {(r.config, r.cell) for r in cand_camp.runs}
    notes = [f"{c} @ {cell}: goodput not compared (no per-request arrays on "
             f"{'either side' if (c, cell) not in pa and (c, cell) not in pb else 'one side'}: --save-detailed)"
             for c, cell in sorted(both - (set(pa) & set(pb)))]
    out = []
    for key in sorted(set(pa) & set(pb), key=lambda k: (conc.get(k[1], 0), k[1], k[0])):
        a, b = pa[key], pb[key]
        ga, gb = [x[0] for x in a], [x[0] for x in b]
        ka, na = sum(x[1] for x in a), sum(x[2] for x in a)
        kb, nb = sum(x[1] for x in b), sum(x[2] for x in b)
        if not na or not nb:
            notes.append(f"{key[0]} @ {key[1]}: goodput not compared (no completed request on a side)")
            continue
        d, lo, hi = proportion_difference(ka, na, kb, nb, noise.confidence)
        att = difference_verdict(lo, hi, noise)
        if min(ga + gb) > 0:
            ratio, clo, chi, method, verdict, _ = decide(GOODPUT, ga, gb, noise)
        else:
            mean_a = statistics.fmean(ga)
            ratio = statistics.fmean(gb) / mean_a if mean_a else None
            clo = chi = None
            method, verdict = ZERO_METHOD, att
        out.append(GoodputDiff(key[0], key[1], conc.get(key[1], 0), statistics.fmean(ga), statistics.fmean(gb),
                               len(ga), len(gb), ratio, clo, chi, method, verdict, 100.0 * ka / na,
                               100.0 * kb / nb, na, nb, 100.0 * d, 100.0 * lo, 100.0 * hi, att,
                               100.0 * ka / na >= slo.attainment_pct, 100.0 * kb / nb >= slo.attainment_pct))
    return out, notes


def slo_of_both(base_plan: dict | None, cand_plan: dict | None) -> tuple[Slo | None, list[str]]:
    """The SLO both sides are judged by (the candidate's), and what to say about it; None when a side has none."""
    a, b = plan_slo(base_plan), plan_slo(cand_plan)
    if a is None or b is None:
        return None, ([f"goodput not compared: only the {'candidate' if b else 'baseline'}'s plan has "
                       "benchmark.slo"] if (a or b) else [])
    if a != b:
        return b, [f"the plans' SLOs differ (baseline: {a.describe()}, attainment {a.attainment_pct:g} %; "
                   f"candidate: {b.describe()}, attainment {b.attainment_pct:g} %): both sides judged by the "
                   "candidate's, from their per-request arrays"]
    return b, []
