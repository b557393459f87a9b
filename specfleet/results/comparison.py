"""`fab compare`: two collected campaigns side by side, a verdict per bench cell (docs/compare.md: the
verdicts, their interval and error rate).

    cmp = compare_dirs("results-0.31/qwen3", "results/qwen3")     # baseline, candidate
    cmp.regressions                                               # the cells that got worse

Each side's runs of a cell are its repeats on every node: the side's own gate said its nodes agree.
The tolerance band is the gate's: what two nodes may differ by is also what two campaigns may differ
by without it counting.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..plan.assertions import Assertion, AssertionResult, check
from ..errors import UserError
from .campaign import Campaign, Expect, scan_campaign
from .gate import DEFAULT_BASELINE, GATE_METRICS, PLAN_DEFAULTS, EquivalenceRule, GateResult, check_equivalence
from .gate_policy import metric_value
from .gpu_gate import split_off_gpu_copies
from .measures import NoiseBand
from .merge import Tables, build_tables
from .compare_rules import IMPROVEMENT, NO_DIFF, REGRESSION, WITHIN, decide, ratio_verdict  # noqa: F401 (the verdicts' home)
from .compare_slo import GoodputDiff, goodput_diffs, slo_of_both
from .consistency import result_table
from .provenance import NOT_RECORDED, node_table
from ..worker.stats import t_quantile

PLAN_SNAPSHOT = "plan.json"   # written beside the host folders by `fab collect` / `fab report`
# plan fields that may differ between the two campaigns: what is being compared (the GPU and the date
# are not plan fields; they show among the provenance differences)
COMPARED_FIELDS = ("vllm_version", "campaign", "server.args")
NODE_FACTS = ("engine", "vllm", "torch", "gpu", "gpus", "driver", "cuda", "python", "venv_digest")


def write_snapshot(campaign_dir: Path, plan) -> None:
    """plan.json: the plan as hashed, with its assertions (not hashed), for `fab compare`."""
    data = {"plan_hash": plan.plan_hash(), "plan": json.loads(plan.canonical_json()),
            "assertions": [a.model_dump(exclude_none=True) for a in plan.assertions]}
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    p = Path(campaign_dir) / PLAN_SNAPSHOT
    if not p.is_file() or p.read_text(encoding="utf-8") != text:
        p.write_text(text, encoding="utf-8")


@dataclass
class Side:
    label: str                    # "baseline" | "candidate"
    dir: Path
    camp: Campaign
    plan: dict | None
    assertions: list[Assertion]
    baseline: str
    gate: GateResult
    tables: Tables | None


def load_side(label: str, path: Path | str, tolerance_pct: float | None = None) -> Side:
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"{path}: no such folder (--{label} names a campaign's results folder, "
                        "results/<campaign>, as fab collect writes it)")
    snap, plan, asserts = path / PLAN_SNAPSHOT, None, []
    if snap.is_file():
        try:
            data = json.loads(snap.read_text(encoding="utf-8"))
            plan = data["plan"]
            asserts = [Assertion.model_validate(a) for a in data.get("assertions") or []]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(f"{snap}: unreadable plan snapshot ({type(e).__name__}: {e}); "
                            "`fab report --plan ...` writes it again") from None
    b = (plan or {}).get("benchmark") or {}
    expect = Expect(None, int(b.get("max_failed_requests") or 0))
    camp = scan_campaign(path, quarantine=False, expect=expect)
    if not camp.runs:
        raise UserError(f"{path}: no valid, done result files ({label} side)")
    baseline = (plan or {}).get("baseline") or DEFAULT_BASELINE
    eq = (plan or {}).get("equivalence") or {}
    rule = EquivalenceRule(metric=eq.get("metric", PLAN_DEFAULTS.metric),
                           concurrency=eq.get("concurrency", PLAN_DEFAULTS.concurrency),
                           tolerance_pct=tolerance_pct or eq.get("tolerance_pct", PLAN_DEFAULTS.tolerance_pct))
    gate = check_equivalence(camp, rule, baseline)
    tables = build_tables(split_off_gpu_copies(camp, baseline), baseline,
                          noise=NoiseBand(rule.tolerance_pct))
    return Side(label, path, camp, plan, asserts, baseline, gate, tables)


# ------------------------------------------------------------------ the decision
@dataclass
class CellDiff:
    config: str
    cell: str
    concurrency: int
    metric: str
    base_mean: float
    cand_mean: float
    n_base: int
    n_cand: int
    ratio: float                 # candidate / baseline
    ci_low: float | None
    ci_high: float | None
    method: str
    verdict: str
    detail: str


def _samples(camp: Campaign, metric: str, nodes: set[str] | None = None) -> dict[tuple[str, str], list[float]]:
    """(config, cell) -> the metric over every run (every repeat on every node, or on `nodes`)."""
    out: dict[tuple[str, str], list[float]] = {}
    for r in camp.runs:
        if nodes is not None and r.host not in nodes:
            continue
        v = metric_value(r.result, metric)
        if v is not None and v == v:
            out.setdefault((r.config, r.cell), []).append(float(v))
    return out


def _conc(camp: Campaign) -> dict[str, int]:
    return {r.cell: r.conc for r in camp.runs}


def cell_diffs(base: Side, cand: Side, metric: str, noise: NoiseBand) -> tuple[list[CellDiff], list[str]]:
    sa, sb = _samples(base.camp, metric), _samples(cand.camp, metric)
    conc = {**_conc(base.camp), **_conc(cand.camp)}
    out = []
    for key in sorted(set(sa) & set(sb), key=lambda k: (conc[k[1]], k[1], k[0] != cand.baseline, k[0])):
        a, b = sa[key], sb[key]
        if min(a + b) <= 0:
            continue
        r, lo, hi, method, verdict, detail = decide(metric, a, b, noise)
        out.append(CellDiff(key[0], key[1], conc[key[1]], metric, statistics.fmean(a), statistics.fmean(b),
                            len(a), len(b), r, lo, hi, method, verdict, detail))
    only = [f"{c} @ {cell}: only in the baseline campaign" for c, cell in sorted(set(sa) - set(sb))]
    only += [f"{c} @ {cell}: only in the candidate campaign" for c, cell in sorted(set(sb) - set(sa))]
    return out, only


# ------------------------------------------------------------------ speedup and acceptance per configuration
@dataclass
class SpeedupDiff:
    config: str
    cell: str
    concurrency: int
    base_speedup: float
    cand_speedup: float
    ratio: float                 # candidate speedup / baseline speedup
    ci_low: float | None
    ci_high: float | None
    verdict: str
    base_accept_pct: float
    cand_accept_pct: float
    base_accept_len: float
    cand_accept_len: float


def _logs(vals: list[float]) -> tuple[float, float, int]:
    lv = [math.log(v) for v in vals]
    return statistics.fmean(lv), (statistics.variance(lv) if len(lv) > 1 else math.nan), len(lv)


def speedup_ratio_interval(groups: list[list[float]], confidence: float) -> tuple[float, float | None, float | None]:
    """(cand_cfg / cand_base) / (base_cfg / base_base) on geometric means, with a Welch-Satterthwaite
    interval of the four independent samples' log means; None ends when a group has one run."""
    (c1, v1, n1), (c0, v0, n0), (b1, w1, m1), (b0, w0, m0) = (_logs(g) for g in groups)
    d = (c1 - c0) - (b1 - b0)
    parts = [(v1, n1), (v0, n0), (w1, m1), (w0, m0)]
    if any(math.isnan(v) for v, _ in parts):
        return math.exp(d), None, None
    se2 = sum(v / n for v, n in parts)
    if se2 == 0:
        return math.exp(d), math.exp(d), math.exp(d)
    df = se2 ** 2 / sum((v / n) ** 2 / (n - 1) for v, n in parts)
    half = t_quantile(1 - (1 - confidence) / 2, df) * math.sqrt(se2)
    return math.exp(d), math.exp(d - half), math.exp(d + half)


def speedup_diffs(base: Side, cand: Side, noise: NoiseBand) -> list[SpeedupDiff]:
    """Per configuration and cell: each side's speedup over its own baseline on the same node(s) (the
    report's pairing), and the change with its interval."""
    out = []
    ra, rb = base.tables.runs, cand.tables.runs
    for _, row in rb[(rb.config != cand.baseline) & rb.speedup.notna()].drop_duplicates(["config", "cell"]).iterrows():
        old = ra[(ra.config == row.config) & (ra.cell == row.cell) & ra.speedup.notna()]
        new = rb[(rb.config == row.config) & (rb.cell == row.cell) & rb.speedup.notna()]
        sa = _samples(base.camp, "output_throughput", set(old.node))
        sb = _samples(cand.camp, "output_throughput", set(new.node))
        key, bkey = (row.config, row.cell), (cand.baseline, row.cell)
        if old.empty or key not in sa or (base.baseline, row.cell) not in sa or bkey not in sb:
            continue
        groups = [sb[key], sb[bkey], sa[key], sa[(base.baseline, row.cell)]]
        r, lo, hi = speedup_ratio_interval(groups, noise.confidence)
        out.append(SpeedupDiff(row.config, row.cell, int(row.concurrency), float(old.speedup.mean()),
                               float(new.speedup.mean()), r, lo, hi, ratio_verdict(r, lo, hi, noise)[0],
                               float(old.acceptance_rate_pct.mean()), float(new.acceptance_rate_pct.mean()),
                               float(old.acceptance_length.mean()), float(new.acceptance_length.mean())))
    return out


# ------------------------------------------------------------------ what else differs
def _values(df, col: str) -> str:
    vals = sorted({str(v) for v in df[col] if str(v) not in ("", "nan")})
    return ", ".join(vals) if vals else NOT_RECORDED


def provenance_diffs(base: Side, cand: Side) -> list[tuple[str, str, str]]:
    """(what, baseline value, candidate value) for every node fact that differs, then the run dates."""
    na, nb = node_table(base.camp), node_table(cand.camp)
    out = [(f, _values(na, f), _values(nb, f)) for f in NODE_FACTS if _values(na, f) != _values(nb, f)]
    ra, rb = result_table(base.camp), result_table(cand.camp)
    for f in ("model", "model_config_sha256", "dataset_sha256", "sampling", "speculative_config"):
        if _values(ra, f) != _values(rb, f):
            out.append((f, _values(ra, f), _values(rb, f)))
    span = lambda df: f"{min(df.first_run, default='')} .. {max(df.last_run, default='')}"  # noqa: E731
    out.append(("run dates", span(na), span(nb)))
    return out


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: d}


def _by_name(plan: dict) -> dict:
    p = dict(plan)
    p["configurations"] = {c.get("name"): {k: v for k, v in c.items() if k != "name"}
                           for c in plan.get("configurations") or []}
    return p


def plan_diffs(base: Side, cand: Side) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """(compared, other): the plan fields that differ, split into what a comparison is for (the vLLM
    version, the campaign's name, server flags) and everything else (named: it may be what moved)."""
    if base.plan is None or cand.plan is None:
        return [], []
    fa, fb = _flatten(_by_name(base.plan)), _flatten(_by_name(cand.plan))
    compared, other = [], []
    for k in sorted(set(fa) | set(fb)):
        if fa.get(k, "<absent>") == fb.get(k, "<absent>"):
            continue
        row = (k, json.dumps(fa.get(k, "<absent>")), json.dumps(fb.get(k, "<absent>")))
        flag = k in COMPARED_FIELDS or (k.startswith("configurations.") and k.endswith(".extra_args"))
        (compared if flag else other).append(row)
    return compared, other


def refusals(base: Side, cand: Side) -> list[str]:
    """Why the two campaigns do not measure the same thing: another model, another dataset."""
    out = []
    if base.plan and cand.plan:
        ma, mb = base.plan["model"]["name"], cand.plan["model"]["name"]
        if ma != mb:
            out.append(f"different models: {ma} (baseline) vs {mb} (candidate), plan model.name")
    ra, rb = result_table(base.camp), result_table(cand.camp)
    for col, what in (("model_config_sha256", "model config.json"), ("dataset_sha256", "dataset")):
        va, vb = _values(ra, col), _values(rb, col)
        if NOT_RECORDED not in (va, vb) and va != vb:
            out.append(f"different {what}: sha256 {va} (baseline) vs {vb} (candidate)")
    if base.plan and cand.plan and not any(o.startswith("different dataset") for o in out):
        ka = (base.plan["benchmark"].get("dataset_name"), base.plan["benchmark"].get("dataset_path"))
        kb = (cand.plan["benchmark"].get("dataset_name"), cand.plan["benchmark"].get("dataset_path"))
        if ka != kb and NOT_RECORDED in (_values(ra, "dataset_sha256"), _values(rb, "dataset_sha256")):
            out.append(f"different datasets: {json.dumps(ka)} (baseline) vs {json.dumps(kb)} (candidate), "
                       "plan benchmark.dataset_name/dataset_path (no sha256 recorded on both sides to show "
                       "they are the same file)")
    return out


# ------------------------------------------------------------------ the whole comparison
@dataclass
class Comparison:
    base: Side
    cand: Side
    metric: str
    noise: NoiseBand
    forced: bool
    refused: list[str]
    provenance: list[tuple[str, str, str]]
    plan_compared: list[tuple[str, str, str]]
    plan_other: list[tuple[str, str, str]]
    cells: list[CellDiff]
    unmatched: list[str]
    speedups: list[SpeedupDiff]
    assertions: list[AssertionResult]
    notes: list[str] = field(default_factory=list)
    goodput: list[GoodputDiff] = field(default_factory=list)   # when both plans have an SLO (compare_slo.py)
    slo: str = ""                                              # the SLO goodput was judged by, in words

    @property
    def simulated(self) -> bool:
        return self.base.camp.simulated or self.cand.camp.simulated

    @property
    def regressions(self) -> list[CellDiff]:
        return [c for c in self.cells if c.verdict == REGRESSION]

    @property
    def speedup_regressions(self) -> list[SpeedupDiff]:
        return [s for s in self.speedups if s.verdict == REGRESSION]

    @property
    def goodput_regressions(self) -> list[GoodputDiff]:
        return [g for g in self.goodput if g.regressed]

    @property
    def assertions_failed(self) -> list[AssertionResult]:
        return [a for a in self.assertions if not a.ok]


def compare_dirs(baseline: Path | str, candidate: Path | str, *, metric: str | None = None,
                 tolerance_pct: float | None = None, force: bool = False) -> Comparison:
    """Compare two campaigns' results folders; UserError when they do not measure the same thing
    (another model or dataset) and not `force`, or when a side's nodes are not equivalent."""
    base = load_side("baseline", baseline, tolerance_pct)
    cand = load_side("candidate", candidate, tolerance_pct)
    refused = refusals(base, cand)
    if refused and not force:
        raise UserError(f"{baseline} vs {candidate}: not compared: {'; '.join(refused)} "
                        "(--force compares anyway and says so in every output)")
    for s in (base, cand):
        if not s.gate.passed and not force:
            raise UserError(f"{s.dir}: the {s.label} campaign's nodes are not equivalent (its gate failed: "
                            f"{'; '.join(c.reason for c in s.gate.checks if not c.passed) or '; '.join(s.gate.problems)}); "
                            "pooling its nodes' runs would compare node differences (--force compares anyway)")
    metric = metric or ((cand.plan or {}).get("equivalence") or {}).get("metric") or PLAN_DEFAULTS.metric
    if metric not in GATE_METRICS:
        raise UserError(f"--metric {metric!r}: one of {', '.join(GATE_METRICS)}")
    noise = NoiseBand(cand.gate.rule.tolerance_pct)
    cells, unmatched = cell_diffs(base, cand, metric, noise)
    compared, other = plan_diffs(base, cand)
    cmp = Comparison(base, cand, metric, noise, force and bool(refused or not base.gate.passed or not cand.gate.passed),
                     refused, provenance_diffs(base, cand), compared, other, cells, unmatched,
                     speedup_diffs(base, cand, noise), check(cand.assertions, cand.tables.runs.to_dict("records")))
    slo, said = slo_of_both(base.plan, cand.plan)
    cmp.notes += said
    if slo is not None:
        cmp.goodput, missing = goodput_diffs(base.camp, cand.camp, slo, noise, {**_conc(base.camp), **_conc(cand.camp)})
        cmp.slo, cmp.notes = f"{slo.describe()}; meets it: >= {slo.attainment_pct:g} % of requests good", cmp.notes + missing
    for s in (base, cand):
        if s.plan is None:
            cmp.notes.append(f"{s.dir}: no {PLAN_SNAPSHOT} (fab collect / fab report write it): plan differences "
                             f"not checked, baseline configuration taken as '{s.baseline}'")
        if not s.gate.passed:
            cmp.notes.append(f"{s.label}: NODES NOT EQUIVALENT (compared with --force)")
    if not cells:
        cmp.notes.append("no bench cell is in both campaigns: nothing to compare")
    return cmp
