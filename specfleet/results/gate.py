"""Node equivalence: may results measured on different nodes be merged?

Every node also runs the baseline configuration. For every pair of nodes and
every concurrency both measured, the baseline's output tok/s, total tok/s,
TPOT, ITL and TTFT are compared (diff % = (B - A) / A x 100, A = the node first
in name order). One rule decides: the rule's metric at the rule's concurrency
must differ by at most `tolerance_pct`. With repeats (>= 2 runs on both nodes)
a difference above the tolerance fails only if Welch's t-test also finds it
significant (p < alpha); otherwise it passes as "within noise" and is reported.
See docs/report.md, "The equivalence gate".
"""
from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field

import pandas as pd

from .campaign import Campaign
from .stats import welch

GATE_METRICS = {
    "output_throughput": "output tok/s",
    "total_token_throughput": "total tok/s",
    "mean_tpot_ms": "TPOT ms",
    "mean_itl_ms": "ITL ms",
    "mean_ttft_ms": "TTFT ms",
}


@dataclass(frozen=True)
class EquivalenceRule:
    metric: str = "output_throughput"
    concurrency: int | None = 16  # None: every concurrency both nodes measured
    tolerance_pct: float = 3.0
    alpha: float = 0.05

    def __post_init__(self) -> None:
        if self.metric not in GATE_METRICS:
            raise ValueError(f"unknown gate metric {self.metric!r}; one of {', '.join(GATE_METRICS)}")
        if not self.tolerance_pct >= 0:
            raise ValueError("tolerance_pct must be >= 0")

    def describe(self) -> str:
        where = f"at concurrency {self.concurrency}" if self.concurrency is not None else "at every concurrency"
        return (f"rule: baseline {GATE_METRICS[self.metric]} must differ by at most {self.tolerance_pct:g} % {where} "
                f"(with repeats: fail only if also significant, Welch p < {self.alpha:g})")


@dataclass
class PairCheck:
    node_a: str
    node_b: str
    conc: int
    metric: str
    mean_a: float
    mean_b: float
    diff_pct: float
    n_a: int
    n_b: int
    p_value: float | None
    passed: bool
    reason: str


@dataclass
class GateResult:
    rule: EquivalenceRule
    baseline: str
    passed: bool
    checks: list[PairCheck] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    table: pd.DataFrame = field(default_factory=pd.DataFrame)

    def summary(self) -> str:
        head = "PASSED" if self.passed else "FAILED"
        lines = [f"node equivalence {head}: {self.rule.describe()}"]
        lines += [f"  {c.node_a} vs {c.node_b} conc {c.conc}: {c.reason}" for c in self.checks]
        lines += [f"  problem: {p}" for p in self.problems]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def baseline_samples(camp: Campaign, baseline: str) -> dict[tuple[str, int], dict[str, list[float]]]:
    """(host, conc) -> metric -> values over repeats, for the baseline config."""
    out: dict[tuple[str, int], dict[str, list[float]]] = {}
    for r in camp.runs:
        if r.config != baseline:
            continue
        d = out.setdefault((r.host, r.conc), {m: [] for m in GATE_METRICS})
        for m in GATE_METRICS:
            d[m].append(float(getattr(r.result, m)))
    return out


def _pct(a: float, b: float) -> float:
    return (b - a) / a * 100.0 if a else math.nan


def decide(rule: EquivalenceRule, a: list[float], b: list[float]) -> tuple[bool, float, float | None, str]:
    """(passed, diff %, p-value or None, reason) for one pair at the rule's point."""
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    diff = _pct(ma, mb)
    w = welch(a, b)
    p = w.p if w else None
    ptxt = f", Welch p={p:.3g} (n={len(a)}/{len(b)})" if p is not None else ""
    if math.isnan(diff):
        return False, diff, p, "baseline value is 0, cannot compare"
    if abs(diff) <= rule.tolerance_pct:
        return True, diff, p, f"{diff:+.2f} % within {rule.tolerance_pct:g} %{ptxt}"
    if p is None:
        return False, diff, p, f"{diff:+.2f} % exceeds {rule.tolerance_pct:g} % (single runs, no spread to test)"
    if p < rule.alpha:
        return False, diff, p, f"{diff:+.2f} % exceeds {rule.tolerance_pct:g} % and is significant{ptxt}"
    return True, diff, p, (f"{diff:+.2f} % exceeds {rule.tolerance_pct:g} % but is within run-to-run "
                           f"noise{ptxt}; add repeats to decide")


def check_equivalence(camp: Campaign, rule: EquivalenceRule | None = None,
                      baseline: str = "vanilla") -> GateResult:
    rule = rule or EquivalenceRule()
    samples = baseline_samples(camp, baseline)
    hosts = camp.hosts
    gate = GateResult(rule=rule, baseline=baseline, passed=True)
    rows = []
    for a, b in itertools.combinations(hosts, 2):
        concs = sorted({c for (h, c) in samples if h == a} & {c for (h, c) in samples if h == b})
        for conc in concs:
            sa, sb = samples[(a, conc)], samples[(b, conc)]
            for m, label in GATE_METRICS.items():
                ma, mb = statistics.fmean(sa[m]), statistics.fmean(sb[m])
                w = welch(sa[m], sb[m])
                rows.append({"concurrency": conc, "metric": label, "node_a": a, "node_b": b,
                             "value_a": ma, "value_b": mb, "diff_pct": _pct(ma, mb),
                             "n_a": len(sa[m]), "n_b": len(sb[m]),
                             "p_value": w.p if w else math.nan, "rule": "", "verdict": ""})
    if len(hosts) < 2:
        gate.notes.append(f"only {len(hosts)} node(s) with results: nothing to compare")
    rule_concs = ([rule.concurrency] if rule.concurrency is not None
                  else sorted({c for (_, c) in samples}))
    for h in hosts:
        for conc in rule_concs:
            if len(hosts) > 1 and (h, conc) not in samples:
                gate.problems.append(f"node {h} has no valid '{baseline}' run at concurrency {conc}: "
                                     "equivalence cannot be verified")
    if len(hosts) > 1 and not rule_concs:
        gate.problems.append(f"no node has a valid '{baseline}' run: equivalence cannot be verified")
    for a, b in itertools.combinations(hosts, 2):
        for conc in rule_concs:
            if (a, conc) not in samples or (b, conc) not in samples:
                continue
            va, vb = samples[(a, conc)][rule.metric], samples[(b, conc)][rule.metric]
            ok, diff, p, reason = decide(rule, va, vb)
            gate.checks.append(PairCheck(a, b, conc, rule.metric, statistics.fmean(va),
                                         statistics.fmean(vb), diff, len(va), len(vb), p, ok, reason))
            for row in rows:
                if (row["node_a"], row["node_b"], row["concurrency"]) == (a, b, conc) \
                        and row["metric"] == GATE_METRICS[rule.metric]:
                    row["rule"] = f"<= {rule.tolerance_pct:g} %"
                    row["verdict"] = "pass" if ok else "FAIL"
    gate.passed = not gate.problems and all(c.passed for c in gate.checks)
    cols = ["concurrency", "metric", "node_a", "node_b", "value_a", "value_b", "diff_pct",
            "n_a", "n_b", "p_value", "rule", "verdict"]
    gate.table = pd.DataFrame(rows, columns=cols)
    return gate
