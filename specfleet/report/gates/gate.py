"""Node equivalence: may results measured on different nodes be merged?

Every node also runs the baseline; for every pair of nodes the baseline's metric at the rule's point
must be *shown* equivalent: the ratio B/A inside [1/(1 + tol), 1 + tol], symmetric, so the decision
does not depend on node names (the policy, its states and error rates: gate_policy.py). A gap at
another concurrency is a named warning (gate.notes). Open-loop cells (a request rate) decide only
where the rule's point has no closed-loop cell: their throughput follows their schedule more than the
node. The GPUs of one node are compared the same way (gpu_gate.py). docs/report.md, "The
equivalence gate", states the method in full.
"""
from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field

import pandas as pd

from ...plan import Equivalence
from ..scan.folder import CollectedFolder, at_cell
from .gpu_gate import gpu_checks, packing_of
from .consistency import mismatches
from .gate_policy import (ALPHA, ALPHA_PER_LOOK, FAILED, INCONCLUSIVE, MERGES, METHOD as POLICY, PASSED, SAMPLES,
                          UNVERIFIED, Decision, decide_state, metric_value, per_start, start_of)
from ..scan.provenance import plan_hashes
from ...plan.sweep import parse_cell
from ...worker.stats import log_welch, ratio_interval, t_two_sided_p

GATE_METRICS = {
    "tpot_weighted_ms": "token-weighted TPOT ms",
    "output_throughput": "output tok/s",
    "total_token_throughput": "total tok/s",
    "mean_tpot_ms": "TPOT ms",
    "mean_itl_ms": "ITL ms",
    "mean_ttft_ms": "TTFT ms",
}
METHOD = "TOST: two one-sided Welch t-tests on log values"
SINGLE_RUN = "single run: plain threshold, no interval: UNVERIFIED"
SINGLE_START = "single server start (its runs share it, one sample): plain threshold, no interval: UNVERIFIED"
VERDICT_WORDS = {PASSED: "pass", UNVERIFIED: "pass (UNVERIFIED)"}  # the table's verdict column
# The rule's defaults are the plan's (a plan without `equivalence:`): one source for both.
PLAN_DEFAULTS = Equivalence()
# The baseline of a campaign folder reported without its plan (a plan names its own).
DEFAULT_BASELINE = "vanilla"


def tost_p(a: list[float], b: list[float], low: float, high: float) -> float | None:
    """p-value of the two one-sided Welch t-tests on log values that low < mean(b)/mean(a) < high
    (H0: the ratio is outside [low, high]). Equivalence at level alpha iff p < alpha, which is the
    same as the (1 - 2 alpha) interval of `ratio_interval` lying inside [low, high]."""
    w = log_welch(a, b)
    if w is None:
        return None
    d, se2, df = w
    if se2 == 0:
        return 0.0 if math.log(low) < d < math.log(high) else 1.0
    se = math.sqrt(se2)

    def t_cdf(x: float) -> float:  # P(T <= x), Student's t with df
        half = 0.5 * t_two_sided_p(x, df)
        return half if x < 0 else 1.0 - half
    return max(1.0 - t_cdf((d - math.log(low)) / se),   # H0: ratio <= low
               t_cdf((d - math.log(high)) / se))        # H0: ratio >= high


@dataclass(frozen=True)
class EquivalenceRule:
    metric: str = PLAN_DEFAULTS.metric
    concurrency: int | None = PLAN_DEFAULTS.concurrency  # None: every concurrency both nodes measured
    tolerance_pct: float = PLAN_DEFAULTS.tolerance_pct
    alpha: float = ALPHA   # overall; each look tests at alpha / len(LOOKS) (gate_policy.py)

    def __post_init__(self) -> None:
        if self.metric not in GATE_METRICS:
            raise ValueError(f"unknown gate metric {self.metric!r}; one of {', '.join(GATE_METRICS)}")
        if not self.tolerance_pct >= 0:
            raise ValueError("tolerance_pct must be >= 0")
        if not 0 < self.alpha < 0.5:
            raise ValueError("alpha must be in (0, 0.5)")

    @property
    def band(self) -> tuple[float, float]:
        """The ratio B/A that counts as equivalent: [1/(1+tol), 1+tol], the same band for A/B."""
        hi = 1.0 + self.tolerance_pct / 100.0
        return 1.0 / hi, hi

    @property
    def alpha_per_look(self) -> float:
        return self.alpha * ALPHA_PER_LOOK / ALPHA

    @property
    def confidence(self) -> float:
        return 1.0 - 2.0 * self.alpha_per_look

    def describe(self) -> str:
        where = f"at concurrency {self.concurrency}" if self.concurrency is not None else "at every concurrency"
        lo, hi = self.band
        return (f"rule: baseline {GATE_METRICS[self.metric]} must be shown equivalent within "
                f"±{self.tolerance_pct:g} % {where} (ratio between nodes inside [{lo:.4f}, {hi:.4f}]); "
                f"with repeats: {POLICY}, i.e. the {self.confidence:.1%} interval of the ratio inside "
                f"that band (entirely outside: FAILED; else INCONCLUSIVE); {SINGLE_RUN}; {SAMPLES}")


@dataclass
class PairCheck:
    node_a: str
    node_b: str
    conc: int
    metric: str
    mean_a: float
    mean_b: float
    diff_pct: float          # (mean B - mean A) / mean A x 100, for display
    n_a: int
    n_b: int
    ci_low: float | None     # (1 - 2 alpha) interval of the ratio B/A; None for single runs
    ci_high: float | None
    tost_p: float | None
    method: str
    passed: bool
    reason: str
    cell: str = ""           # the bench cell compared (conc<N> for a plain plan)
    state: str = FAILED      # gate_policy: PASSED | UNVERIFIED | INCONCLUSIVE | FAILED
    more_runs: int | None = None
    within_pct: float | None = None
    runs_a: int = 0          # runs behind the n_a / n_b samples (server starts)
    runs_b: int = 0

    @property
    def where(self) -> str:
        return at_cell(self.conc, self.cell, "conc")


@dataclass
class GateResult:
    rule: EquivalenceRule
    baseline: str
    passed: bool
    checks: list[PairCheck] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    table: pd.DataFrame = field(default_factory=pd.DataFrame)
    mixed_plans: dict[str, list[str]] = field(default_factory=dict)  # plan hash -> node/config items
    mixed_provenance: list[str] = field(default_factory=list)  # consistency.mismatches: GPU, versions, decoding
    packing: str = ""   # how servers shared the nodes (gpu_gate.packing_of): the report states it

    @property
    def nodes_equivalent(self) -> bool:
        """The node checks alone (a mixed-plan refusal is the one problem that is not about nodes)."""
        return all(c.passed for c in self.checks) and \
            len(self.problems) == (1 if self.mixed_plans else 0) + len(self.mixed_provenance)

    @property
    def verdict(self) -> str:
        """FAILED (a problem, or a pair shown different) > INCONCLUSIVE > PASSED (UNVERIFIED) > PASSED."""
        states = {c.state for c in self.checks}
        if self.problems or FAILED in states:
            return FAILED
        if INCONCLUSIVE in states:
            within = max((c.within_pct for c in self.checks if c.within_pct is not None), default=None)
            undecided = [c for c in self.checks if c.state == INCONCLUSIVE]
            how = (f"the data can show equivalence only within ±{within:.1f} %" if within is not None else
                   "the data cannot show equivalence")
            more = [c for c in undecided if c.more_runs]
            # --gate-runs counts runs per node in all, and each run it adds is a server start of its own
            nxt = max((max(c.runs_a, c.runs_b) + c.more_runs for c in more), default=0)
            add = (f"; {max(c.more_runs for c in more)} more run(s) of the baseline per node for the "
                   f"next look (fab bench --gate-runs {nxt}; docs/report.md, \"Adding repeats\")" if more else
                   "; the run budget is spent" if all(c.more_runs is None for c in undecided) else "")
            return f"{INCONCLUSIVE}: {how} (margin ±{self.rule.tolerance_pct:g} %){add}"
        if UNVERIFIED in states:
            return (f"{PASSED} ({UNVERIFIED}: a single server start on a node shows no spread between starts, "
                    "nothing is verified)")
        return PASSED

    def summary(self) -> str:
        head = self.verdict
        lines = [f"node equivalence {head}: {self.rule.describe()}"]
        lines += [f"  {c.node_a} vs {c.node_b} {c.where}: {c.reason}" for c in self.checks]
        lines += [f"  problem: {p}" for p in self.problems]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


START = "start"   # _metric_samples: the key of each value's server start (gate_policy.start_of)


def _metric_samples(runs, key) -> dict:
    """key(run) -> gate metric -> its values over those runs (and START -> each run's server start)."""
    out: dict = {}
    for r in runs:
        d = out.setdefault(key(r), {START: [], **{m: [] for m in GATE_METRICS}})
        d[START].append(start_of(r.path.name, r.result.extra))
        for m in GATE_METRICS:
            d[m].append(metric_value(r.result, m))
    return out


def _shared_cells(samples, a: str, b: str, conc_of: dict[str, int]) -> list[str]:
    """The bench cells both nodes measured the baseline in, by concurrency."""
    return sorted({c for (h, c) in samples if h == a} & {c for (h, c) in samples if h == b},
                  key=lambda c: (conc_of[c], c))


def open_loop(cell: str) -> bool:
    """A cell whose requests arrive at a set rate (`conc8-rate4`), not as fast as the server answers."""
    parsed = parse_cell(cell)
    return bool(parsed and parsed["request_rate"] is not None)


def _pct(a: float, b: float) -> float:
    return (b - a) / a * 100.0 if a else math.nan


def beyond_note(diff_pct: float, rule: EquivalenceRule) -> str:
    """The table's verdict on a row the gate does not decide on (another cell or metric): a gap beyond
    the band is said on the row itself, where a node 6 % slower at c=1 only would otherwise pass unseen."""
    if diff_pct != diff_pct or abs(diff_pct) <= rule.tolerance_pct:
        return ""
    return (f"NOTE: {diff_pct:+.2f} % beyond ±{rule.tolerance_pct:g} % (not the gate's point: does not decide "
            "the merge; look at this node here)")


def _pcts(lo: float | None, hi: float | None) -> str:
    return f"[{(lo - 1) * 100:+.2f} %, {(hi - 1) * 100:+.2f} %]"


def decide(rule: EquivalenceRule, a: list[float], b: list[float], starts_a: list[str] | None = None,
           starts_b: list[str] | None = None) -> PairCheck:
    """The decision for one pair at the rule's point (node names and conc left blank). With each run's
    server start (starts_a / starts_b), the samples are the starts (gate_policy.per_start); without,
    every run is its own start."""
    runs_a, runs_b = len(a), len(b)
    a, b = per_start(a, starts_a), per_start(b, starts_b)
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    diff = _pct(ma, mb)
    lo, hi = rule.band
    band = f"±{rule.tolerance_pct:g} % band (ratio [{lo:.4f}, {hi:.4f}])"
    chk = PairCheck("", "", 0, rule.metric, ma, mb, diff, len(a), len(b), None, None, None, SINGLE_RUN,
                    False, "", runs_a=runs_a, runs_b=runs_b)
    n_said = f"n={len(a)}/{len(b)}" + ("" if (runs_a, runs_b) == (len(a), len(b)) else
                                       f" server starts of {runs_a}/{runs_b} runs (runs sharing a start count once)")
    if min(a + b) <= 0:
        chk.reason = "a baseline value is <= 0, cannot compare"
        return chk
    n = min(len(a), len(b))
    ri = ratio_interval(a, b, rule.confidence)
    d = decide_state(n, ri.low if ri else None, ri.high if ri else None, rule.band, mb / ma)
    chk.state, chk.passed, chk.more_runs, chk.within_pct = d.state, d.merges, d.more_runs, d.within_pct
    if ri is None:
        shared = (len(a) == 1 and runs_a > 1) or (len(b) == 1 and runs_b > 1)   # one start, several runs
        chk.method = SINGLE_START if shared else SINGLE_RUN
        chk.reason = (f"{diff:+.2f} % {'within' if d.merges else 'outside'} the {band} "
                      f"({chk.method}; {n_said}): {_words(d, rule)}")
        return chk
    chk.ci_low, chk.ci_high, chk.method = ri.low, ri.high, METHOD
    chk.tost_p = tost_p(a, b, lo, hi)
    ci = (f"{ri.confidence:.1%} CI of the ratio {_pcts(ri.low, ri.high)} "
          f"({METHOD}, df {ri.df:.1f}, {n_said}, TOST p={chk.tost_p:.3g})")
    chk.reason = f"{diff:+.2f} %, {ci}: {_words(d, rule)}"
    return chk


def _words(d: Decision, rule: EquivalenceRule) -> str:
    if d.state == PASSED:
        return "PASSED: shown equivalent (interval inside the band)"
    if d.state == UNVERIFIED:
        return (f"{UNVERIFIED} pass: one server start shows no spread between starts; runs on starts of their "
                f"own (fab bench --gate-runs; {rule.tolerance_pct:g} % margin) verify it")
    if d.state == FAILED:
        return f"FAILED: shown to differ by more than ±{rule.tolerance_pct:g} % (interval outside the band)"
    more = (f"add {d.more_runs} run(s) of the baseline per node, each on its own server start, for the next look"
            if d.more_runs else
            "the run budget is spent")
    return (f"{INCONCLUSIVE}: the data can show equivalence only within ±{d.within_pct:.1f} %; {more} "
            "(docs/report.md, \"Adding repeats\")")


def check_equivalence(camp: CollectedFolder, rule: EquivalenceRule | None = None,
                      baseline: str = DEFAULT_BASELINE, vllm_pin: str | None = None) -> GateResult:
    rule = rule or EquivalenceRule()
    # (host, bench cell) -> metric -> the baseline's values over repeats: a sweep's cells at one
    # concurrency are compared each on its own
    samples = _metric_samples([r for r in camp.runs if r.config == baseline], lambda r: (r.host, r.cell))
    conc_of = {r.cell: r.conc for r in camp.runs}
    hosts = camp.hosts
    gate = GateResult(rule=rule, baseline=baseline, passed=True)
    if len(hosts) < 2:
        gate.notes.append(f"only {len(hosts)} node(s) with results: nothing to compare")
    all_cells = sorted({c for (_, c) in samples}, key=lambda c: (conc_of[c], c))
    rule_cells = [c for c in all_cells if rule.concurrency is None or conc_of[c] == rule.concurrency]
    open_cells = [c for c in rule_cells if open_loop(c)]
    if open_cells and len(open_cells) < len(rule_cells):
        rule_cells = [c for c in rule_cells if c not in open_cells]
        gate.notes.append(f"open-loop cell(s) {', '.join(open_cells)} do not decide the merge: their requests "
                          "arrive on a schedule, so the closed-loop cell(s) " + ", ".join(rule_cells) +
                          " at the same concurrency decide; the open-loop ones are compared as other points are")
    if rule.concurrency is not None and not rule_cells:
        rule_cells = [f"conc{rule.concurrency}"]  # nobody has it: each node's problem names it
    for h in hosts:
        for cell in rule_cells:
            if len(hosts) > 1 and (h, cell) not in samples:
                gate.problems.append(f"node {h} has no valid '{baseline}' run at "
                                     f"{at_cell(conc_of.get(cell, rule.concurrency), cell)}: "
                                     "equivalence cannot be verified")
    if len(hosts) > 1 and not rule_cells:
        gate.problems.append(f"no node has a valid '{baseline}' run: equivalence cannot be verified")
    rows = []
    for a, b in itertools.combinations(hosts, 2):
        for cell in _shared_cells(samples, a, b, conc_of):
            sa, sb = samples[(a, cell)], samples[(b, cell)]
            chk = decide(rule, sa[rule.metric], sb[rule.metric], sa[START], sb[START])
            chk.node_a, chk.node_b, chk.conc, chk.cell = a, b, conc_of[cell], cell
            if cell in rule_cells:
                gate.checks.append(chk)
            elif chk.state in (FAILED, INCONCLUSIVE) or abs(chk.diff_pct) > rule.tolerance_pct:
                # the rule's test at every other cell both nodes measured: a gap there is a named warning
                gate.notes.append(f"WARNING: {a} vs {b} at {at_cell(chk.conc, cell)} (not the rule's point): "
                                 f"baseline {GATE_METRICS[rule.metric]} {chk.reason}")
            method = "plain threshold" if chk.ci_low is None else f"{rule.confidence:.0%} CI"
            for m, label in GATE_METRICS.items():  # the table: every metric; the rule's carries the verdict
                xa, xb = per_start(sa[m], sa[START]), per_start(sb[m], sb[START])   # as the decision counts
                ri = ratio_interval(xa, xb, rule.confidence)
                ma, mb = statistics.fmean(xa), statistics.fmean(xb)
                said = cell in rule_cells and m == rule.metric
                rows.append({"concurrency": chk.conc, "cell": cell, "metric": label, "node_a": a, "node_b": b,
                             "value_a": ma, "value_b": mb, "diff_pct": _pct(ma, mb),
                             "n_a": len(xa), "n_b": len(xb),
                             "ci_low_pct": (ri.low - 1) * 100 if ri else math.nan,
                             "ci_high_pct": (ri.high - 1) * 100 if ri else math.nan,
                             "rule": f"±{rule.tolerance_pct:g} %, {method}" if said else "",
                             "verdict": VERDICT_WORDS.get(chk.state, chk.state) if said else
                             beyond_note(_pct(ma, mb), rule)})
    # across one node's GPUs
    gchecks, gnotes = gpu_checks(camp, rule, baseline, decide, lambda runs: _metric_samples(runs, lambda r: r.conc))
    gate.checks += gchecks
    gate.notes += gnotes
    gate.packing = packing_of(camp)
    hashes = plan_hashes(camp)
    if len(hashes) > 1:  # results of different plans are not one campaign, whatever the nodes say
        gate.mixed_plans = hashes
        gate.problems.append("the results come from different plans (plan hash " + "; ".join(
            f"{h} on {', '.join(items)}" for h, items in sorted(hashes.items())) + "): not merged; "
            "re-run with one plan, or --force merges and stamps every output")
    gate.mixed_provenance = mismatches(camp, vllm_pin)
    gate.problems += [f"{m}: not merged (one campaign is one GPU model, driver, CUDA, torch, vLLM and decoding; "
                      "--force merges and stamps every output MIXED PROVENANCE)" for m in gate.mixed_provenance]
    gate.passed = not gate.problems and all(c.state in MERGES for c in gate.checks)
    cols = ["concurrency", "cell", "metric", "node_a", "node_b", "value_a", "value_b", "diff_pct",
            "n_a", "n_b", "ci_low_pct", "ci_high_pct", "rule", "verdict"]
    gate.table = pd.DataFrame(rows, columns=cols)
    return gate

