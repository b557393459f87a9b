"""`fab compare`: two collected campaigns side by side, a verdict per bench cell (docs/compare.md: the
verdicts, their interval and error rate).

    cmp = compare_dirs("results-0.31/qwen3", "results/qwen3")     # baseline, candidate
    cmp.regressions                                               # the cells that got worse

Each side's runs of a cell are its repeats on every node: the side's own gate said its nodes agree.
The tolerance band is the gate's: what two nodes may differ by is also what two campaigns may differ
by without it counting. Goodput and SLO attainment are compared when both plans have
`benchmark.slo`, judged by one SLO, the candidate's: goodput comes from the per-request arrays, so the
baseline's requests can be judged by it too. A run with goodput 0 has no log value: such a cell is
judged on its SLO attainment.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ...plan.assertions import Assertion, AssertionResult, check
from ...plan.slo import Slo
from ...errors import UserError
from ... import untrusted_json
from ...worker.runspec import ENGINE_FLAGS
from ..scan.folder import CollectedFolder, Expect, scan_folder
from ..gates.gate import (DEFAULT_BASELINE, GATE_METRICS, PLAN_DEFAULTS, EquivalenceRule, GateResult,
                          check_equivalence, open_loop)
from ..gates.gate_policy import metric_value
from ..tables.compare_policy import (LOWER_IS_BETTER, REGRESSION, UNDECIDABLE, Figure, Judged, OneSided,
                                     judged_metrics, one_sided, ratio_test, settle)
from ..render.goodput import good_requests
from ..gates.gpu_gate import split_off_gpu_copies
from ..tables.measures import NoiseBand, rate_check, speed
from ..tables.merge import Tables, build_tables
from ..gates.consistency import TEMPLATE_WORDS, facts_by_run, result_table, version_of
from ..scan.plan_snapshot import PLAN_SNAPSHOT, field_diffs
from ..scan.provenance import NOT_RECORDED, node_table, simulated_signals
from ...worker.stats import ratio_interval, t_quantile, wilson_interval

# plan fields that may differ between the two campaigns: what is being compared (the GPU and the date
# are not plan fields; they show among the provenance differences)
# the server's flags: its args and the engine fields the plan types (runspec.ENGINE_FLAGS), per configuration too
COMPARED_FIELDS = ("vllm_version", "campaign", "server.args", *(f"server.{k}" for k in ENGINE_FLAGS))
NODE_FACTS = ("engine", "vllm", "torch", "gpu", "gpus", "driver", "cuda", "python", "venv_digest")


@dataclass
class Side:
    label: str                    # "baseline" | "candidate"
    dir: Path
    camp: CollectedFolder
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
            data = untrusted_json.loads(snap.read_text(encoding="utf-8"))  # a nesting bomb: a ValueError
            plan = data["plan"]
            asserts = [Assertion.model_validate(a) for a in data.get("assertions") or []]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(f"{snap}: unreadable plan snapshot ({type(e).__name__}: {e}); "
                            "`fab report --plan ...` writes it again") from None
    b = (plan or {}).get("benchmark") or {}
    expect = Expect(None, int(b.get("max_failed_requests") or 0))
    camp = scan_folder(path, quarantine=False, expect=expect)
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


# ------------------------------------------------------------------ the cells
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
    ratio: float                 # candidate / baseline (geometric means with >= 2 runs a side)
    ci_low: float | None
    ci_high: float | None
    method: str
    judged: Judged = field(default_factory=Judged)

    @property
    def verdict(self) -> str:
        return self.judged.verdict

    @property
    def detail(self) -> str:
        return self.judged.detail


def _excludes_one(lo: float | None, hi: float | None, better_up: bool = True) -> int:
    if lo is None or hi is None or lo <= 1.0 <= hi:
        return 0
    return 1 if (lo > 1.0) == better_up else -1


def _samples(camp: CollectedFolder, metric: str, nodes: set[str] | None = None) -> dict[tuple[str, str], list[float]]:
    """(config, cell) -> the metric over every run (every repeat on every node, or on `nodes`)."""
    out: dict[tuple[str, str], list[float]] = {}
    for r in camp.runs:
        if nodes is not None and r.host not in nodes:
            continue
        v = metric_value(r.result, metric)
        if v is not None and v == v:
            out.setdefault((r.config, r.cell), []).append(float(v))
    return out


def _conc(camp: CollectedFolder) -> dict[str, int]:
    return {r.cell: r.conc for r in camp.runs}


def cell_diff(key: tuple[str, str], conc: int, metric: str, a: list[float], b: list[float],
              noise: NoiseBand) -> tuple[CellDiff, Figure]:
    """One cell on one metric: its ratio, interval and test (compare_policy.ratio_test)."""
    up = metric not in LOWER_IS_BETTER
    ri = ratio_interval(a, b, noise.confidence)
    if ri is None:
        r, lo, hi = statistics.fmean(b) / statistics.fmean(a), None, None
        method = f"single run (n={len(a)}/{len(b)}): no interval"
    else:
        r, lo, hi = ri.ratio, ri.low, ri.high
        method = (f"{noise.confidence:.0%} CI, Welch's t on log values, n={len(a)}/{len(b)}; one-sided test "
                  "against the band")
    d = CellDiff(key[0], key[1], conc, metric, statistics.fmean(a), statistics.fmean(b), len(a), len(b),
                 r, lo, hi, method)
    return d, Figure(d.judged, ratio_test(a, b, noise.tolerance_pct, up), r, up, _excludes_one(lo, hi, up))


def cell_diffs(base: Side, cand: Side, metrics: list[str] | None, plan_metric: str | None,
               noise: NoiseBand) -> tuple[list[CellDiff], list[Figure], list[str]]:
    """Every cell in both campaigns on each metric it is judged on (compare_policy.judged_metrics)."""
    conc = {**_conc(base.camp), **_conc(cand.camp)}
    keys_a = {(r.config, r.cell) for r in base.camp.runs}
    keys_b = {(r.config, r.cell) for r in cand.camp.runs}
    wanted = {m for cell in {k[1] for k in keys_a | keys_b}
              for m in judged_metrics(plan_metric, metrics, open_loop(cell))}
    sa = {m: _samples(base.camp, m) for m in wanted}
    sb = {m: _samples(cand.camp, m) for m in wanted}
    out, figs = [], []
    for key in sorted(keys_a & keys_b, key=lambda k: (conc[k[1]], k[1], k[0] != cand.baseline, k[0])):
        for m in judged_metrics(plan_metric, metrics, open_loop(key[1])):
            a, b = sa[m].get(key), sb[m].get(key)
            if not a or not b or min(a + b) <= 0:
                continue
            d, f = cell_diff(key, conc[key[1]], m, a, b, noise)
            out.append(d)
            figs.append(f)
    only = [f"{c} @ {cell}: only in the baseline campaign" for c, cell in sorted(keys_a - keys_b)]
    only += [f"{c} @ {cell}: only in the candidate campaign" for c, cell in sorted(keys_b - keys_a)]
    return out, figs, only


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
    base_accept_pct: float
    cand_accept_pct: float
    base_accept_len: float
    cand_accept_len: float
    judged: Judged = field(default_factory=Judged)

    @property
    def verdict(self) -> str:
        return self.judged.verdict


def _logs(vals: list[float]) -> tuple[float, float, int]:
    lv = [math.log(v) for v in vals]
    return statistics.fmean(lv), (statistics.variance(lv) if len(lv) > 1 else math.nan), len(lv)


def speedup_log_welch(groups: list[list[float]]) -> tuple[float, float | None, float]:
    """(d, se2, df) of log((cand_cfg / cand_base) / (base_cfg / base_base)) on the four independent
    samples' log means, Welch-Satterthwaite df; se2 None when a group has one run."""
    (c1, v1, n1), (c0, v0, n0), (b1, w1, m1), (b0, w0, m0) = (_logs(g) for g in groups)
    d = (c1 - c0) - (b1 - b0)
    parts = [(v1, n1), (v0, n0), (w1, m1), (w0, m0)]
    if any(math.isnan(v) for v, _ in parts):
        return d, None, math.nan
    se2 = sum(v / n for v, n in parts)
    if se2 == 0:
        return d, 0.0, math.inf
    return d, se2, se2 ** 2 / sum((v / n) ** 2 / (n - 1) for v, n in parts)


def speedup_ratio_interval(groups: list[list[float]], confidence: float) -> tuple[float, float | None, float | None]:
    """The ratio of the two speedups on geometric means with its interval; None ends when a group has
    one run."""
    d, se2, df = speedup_log_welch(groups)
    if se2 is None:
        return math.exp(d), None, None
    half = 0.0 if se2 == 0 else t_quantile(1 - (1 - confidence) / 2, df) * math.sqrt(se2)
    return math.exp(d), math.exp(d - half), math.exp(d + half)


def _speeds(camp: CollectedFolder, nodes: set[str]) -> dict[tuple[str, str], list[float]]:
    """(config, cell) -> what the report's speedup is a ratio of (measures.speed: output tok/s, per token
    in an open-loop cell), over the runs on `nodes`."""
    out: dict[tuple[str, str], list[float]] = {}
    for r in camp.runs:
        if r.host in nodes and (v := speed(r.result, r.cell)) == v:
            out.setdefault((r.config, r.cell), []).append(v)
    return out


def speedup_diffs(base: Side, cand: Side, noise: NoiseBand) -> tuple[list[SpeedupDiff], list[Figure]]:
    """Per configuration and cell: each side's speedup over its own baseline on the same node(s) (the
    report's pairing), and the change with its interval and test."""
    out, figs = [], []
    ra, rb = base.tables.runs, cand.tables.runs
    for _, row in rb[(rb.config != cand.baseline) & rb.speedup.notna()].drop_duplicates(["config", "cell"]).iterrows():
        old = ra[(ra.config == row.config) & (ra.cell == row.cell) & ra.speedup.notna()]
        new = rb[(rb.config == row.config) & (rb.cell == row.cell) & rb.speedup.notna()]
        sa = _speeds(base.camp, set(old.node))
        sb = _speeds(cand.camp, set(new.node))
        key, bkey = (row.config, row.cell), (cand.baseline, row.cell)
        if old.empty or key not in sa or (base.baseline, row.cell) not in sa or bkey not in sb:
            continue
        groups = [sb[key], sb[bkey], sa[key], sa[(base.baseline, row.cell)]]
        r, lo, hi = speedup_ratio_interval(groups, noise.confidence)
        d, se2, df = speedup_log_welch(groups)
        s = SpeedupDiff(row.config, row.cell, int(row.concurrency), float(old.speedup.mean()),
                        float(new.speedup.mean()), r, lo, hi,
                        float(old.acceptance_rate_pct.mean()), float(new.acceptance_rate_pct.mean()),
                        float(old.acceptance_length.mean()), float(new.acceptance_length.mean()))
        test = None if se2 is None else one_sided(d, se2, df, noise.tolerance_pct, True)
        out.append(s)
        figs.append(Figure(s.judged, test, r, True, _excludes_one(lo, hi)))
    return out, figs


# ------------------------------------------------------------------ goodput under the SLO
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


def attainment_test(k1: int, n1: int, k2: int, n2: int, tolerance_pct: float) -> OneSided:
    """One-sided p-values of the attainment difference against ±tolerance_pct points, by inverting
    Newcombe's interval: p_worse = (1 - c) / 2 where the upper end of the c-interval is -tol (bisection;
    the interval widens with c). No standard error: its power is not stated."""
    tol = tolerance_pct / 100.0

    def p_at(end: int, bound: float) -> float:
        beyond = (lambda c: proportion_difference(k1, n1, k2, n2, c)[end] < bound) if end == 2 else \
            (lambda c: proportion_difference(k1, n1, k2, n2, c)[end] > bound)
        lo, hi = 1e-9, 1.0 - 1e-12
        if not beyond(lo):
            return 1.0
        if beyond(hi):
            return (1.0 - hi) / 2.0
        for _ in range(60):
            mid = (lo + hi) / 2.0
            lo, hi = (mid, hi) if beyond(mid) else (lo, mid)
        return (1.0 - lo) / 2.0

    return OneSided(p_at(2, -tol), p_at(1, tol), math.nan, math.nan)


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
    base_attainment_pct: float
    cand_attainment_pct: float
    base_requests: int           # completed requests, pooled over runs
    cand_requests: int
    attainment_change_pp: float
    attainment_low_pp: float
    attainment_high_pp: float
    base_meets: bool
    cand_meets: bool
    judged: Judged = field(default_factory=Judged)       # goodput's (attainment's when a run's goodput is 0)
    attainment: Judged = field(default_factory=Judged)

    @property
    def verdict(self) -> str:
        return self.judged.verdict

    @property
    def attainment_verdict(self) -> str:
        return self.attainment.verdict

    @property
    def regressed(self) -> bool:
        return REGRESSION in (self.verdict, self.attainment_verdict)


def plan_slo(plan: dict | None) -> Slo | None:
    raw = ((plan or {}).get("benchmark") or {}).get("slo")
    return Slo.model_validate(raw) if raw else None


def _per_run(camp: CollectedFolder, slo: Slo) -> dict[tuple[str, str], list[tuple[float, int, int]]]:
    """(config, cell) -> (goodput, good, completed) per run with per-request arrays."""
    out: dict[tuple[str, str], list[tuple[float, int, int]]] = {}
    for r in camp.runs:
        if (g := good_requests(r, slo)) is not None and r.result.duration:
            out.setdefault((r.config, r.cell), []).append((g[0] / r.result.duration, g[0], g[1]))
    return out


def goodput_diffs(base_camp: CollectedFolder, cand_camp: CollectedFolder, slo: Slo, noise: NoiseBand,
                  conc: dict[str, int]) -> tuple[list[GoodputDiff], list[Figure], list[str]]:
    """Per cell in both campaigns with per-request arrays on both sides, the figures judged; notes for
    the cells without."""
    pa, pb = _per_run(base_camp, slo), _per_run(cand_camp, slo)
    both = {(r.config, r.cell) for r in base_camp.runs} & {(r.config, r.cell) for r in cand_camp.runs}
    notes = [f"{c} @ {cell}: goodput not compared (no per-request arrays on "
             f"{'either side' if (c, cell) not in pa and (c, cell) not in pb else 'one side'}: --save-detailed)"
             for c, cell in sorted(both - (set(pa) & set(pb)))]
    out, figs = [], []
    for key in sorted(set(pa) & set(pb), key=lambda k: (conc.get(k[1], 0), k[1], k[0])):
        a, b = pa[key], pb[key]
        ga, gb = [x[0] for x in a], [x[0] for x in b]
        ka, na = sum(x[1] for x in a), sum(x[2] for x in a)
        kb, nb = sum(x[1] for x in b), sum(x[2] for x in b)
        if not na or not nb:
            notes.append(f"{key[0]} @ {key[1]}: goodput not compared (no completed request on a side)")
            continue
        d, lo, hi = proportion_difference(ka, na, kb, nb, noise.confidence)
        zero = min(ga + gb) <= 0
        mean_a = statistics.fmean(ga)
        if zero:
            ratio, clo, chi, method = (statistics.fmean(gb) / mean_a if mean_a else None), None, None, ZERO_METHOD
        else:
            ri = ratio_interval(ga, gb, noise.confidence)
            ratio, clo, chi = (ri.ratio, ri.low, ri.high) if ri else (statistics.fmean(gb) / mean_a, None, None)
            method = (f"{noise.confidence:.0%} CI, Welch's t on log values, n={len(ga)}/{len(gb)}" if ri
                      else f"single run (n={len(ga)}/{len(gb)}): no interval")
        g = GoodputDiff(key[0], key[1], conc.get(key[1], 0), statistics.fmean(ga), statistics.fmean(gb),
                        len(ga), len(gb), ratio, clo, chi, method, 100.0 * ka / na,
                        100.0 * kb / nb, na, nb, 100.0 * d, 100.0 * lo, 100.0 * hi,
                        100.0 * ka / na >= slo.attainment_pct, 100.0 * kb / nb >= slo.attainment_pct)
        out.append(g)
        # goodput 0 has no log value: not a figure of its own, its verdict is the attainment's (compare_dirs)
        if not zero:
            figs.append(Figure(g.judged, ratio_test(ga, gb, noise.tolerance_pct, True), ratio, True,
                                _excludes_one(clo, chi)))
        figs.append(Figure(g.attainment, attainment_test(ka, na, kb, nb, noise.tolerance_pct), None, True,
                            0 if lo <= 0 <= hi else (1 if lo > 0 else -1)))
    return out, figs, notes


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


# ------------------------------------------------------------------ open-loop cells: offered vs achieved
def rate_rows(base: Side, cand: Side) -> list[list[str]]:
    """Per open-loop cell in both campaigns: each side's offered and achieved rate and how many of its
    runs sustained the rate (measures.rate_check); a side that did not is judged on a growing queue."""
    rows = []
    keys = sorted({(r.config, r.cell) for r in base.camp.runs} & {(r.config, r.cell) for r in cand.camp.runs})
    for cfg, cell in keys:
        if not open_loop(cell):
            continue
        row = [cfg, cell]
        for s in (base, cand):
            checks = [c for r in s.camp.runs if (r.config, r.cell) == (cfg, cell) and (c := rate_check(r.result))]
            if not checks:
                row += ["not recorded", ""]
                continue
            held = sum(c.sustained for c in checks)
            row += [f"{statistics.fmean(c.achieved for c in checks):.3g} of {checks[0].offered:g} req/s",
                    f"{held} of {len(checks)} runs" + ("" if held == len(checks) else " (NOT SUSTAINED)")
                    + (f"; client cap {checks[0].capped} (coordinated omission)" if checks[0].capped else "")]
        rows.append(row)
    return rows


# ------------------------------------------------------------------ what else differs
def _values(df, col: str) -> str:
    vals = sorted({str(v) for v in df[col] if str(v) not in ("", "nan")})
    return ", ".join(vals) if vals else NOT_RECORDED


def same_json(text: str) -> str:
    """A JSON object as one canonical text (keys sorted, compact), other text as it is. The worker of
    issue 22 renders --speculative-config from run.json (sorted keys), the bastion before it in the
    plan's order: the same configuration, recorded in two spellings."""
    try:
        value = untrusted_json.loads(text)  # a worker's text: a nesting bomb is a ValueError, not a crash
    except ValueError:
        return text
    return json.dumps(value, sort_keys=True, separators=(",", ":")) if isinstance(value, dict) else text


def provenance_diffs(base: Side, cand: Side) -> list[tuple[str, str, str]]:
    """(what, baseline value, candidate value) for every node fact that differs, then the run dates."""
    na, nb = node_table(base.camp), node_table(cand.camp)
    out = [(f, _values(na, f), _values(nb, f)) for f in NODE_FACTS if _values(na, f) != _values(nb, f)]
    ra, rb = result_table(base.camp), result_table(cand.camp)
    for df in (ra, rb):
        df["speculative_config"] = df["speculative_config"].map(lambda v: same_json(str(v)))
    for f in ("model", "model_config_sha256", "dataset_sha256", "sampling", "speculative_config"):
        if _values(ra, f) != _values(rb, f):
            out.append((f, _values(ra, f), _values(rb, f)))
    span = lambda df: f"{min(df.first_run, default='')} .. {max(df.last_run, default='')}"  # noqa: E731
    out.append(("run dates", span(na), span(nb)))
    return out


def plan_diffs(base: Side, cand: Side) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """(compared, other): the plan fields that differ, split into what a comparison is for (the vLLM
    version, the campaign's name, server flags) and everything else (named: it may be what moved)."""
    if base.plan is None or cand.plan is None:
        return [], []
    compared, other = [], []
    for row in field_diffs(base.plan, cand.plan):
        k = row[0]
        flag = k in COMPARED_FIELDS or (k.startswith("configurations.") and k.rsplit(".", 1)[-1] in
                                         ("extra_args", *ENGINE_FLAGS))
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
    line = template_refusal(base, cand)
    if line:
        out.append(line)
    if base.plan and cand.plan and not any(o.startswith("different dataset") for o in out):
        ka = (base.plan["benchmark"].get("dataset_name"), base.plan["benchmark"].get("dataset_path"))
        kb = (cand.plan["benchmark"].get("dataset_name"), cand.plan["benchmark"].get("dataset_path"))
        if ka != kb and NOT_RECORDED in (_values(ra, "dataset_sha256"), _values(rb, "dataset_sha256")):
            out.append(f"different datasets: {json.dumps(ka)} (baseline) vs {json.dumps(kb)} (candidate), "
                       "plan benchmark.dataset_name/dataset_path (no sha256 recorded on both sides to show "
                       "they are the same file)")
    return out


def template_refusal(base: Side, cand: Side) -> str | None:
    """One line when the two sides' prompts were chat-templated differently (vLLM 0.34 skips the bench
    client's template for chat backends: same flags, other prompts), naming each side's releases."""
    def side(s: Side) -> dict[str, set[str]]:   # behaviour -> vLLM versions
        out: dict[str, set[str]] = {}
        for run, f in facts_by_run(s.camp):
            for value, _ in f["chat_template"]:
                out.setdefault(value, set()).add(version_of(f))
        return out
    a, b = side(base), side(cand)
    if not a or not b or set(a) == set(b):
        return None
    say = lambda d: "; ".join(f"{TEMPLATE_WORDS.get(t, t)} under vLLM {', '.join(sorted(vs))}"  # noqa: E731
                              for t, vs in sorted(d.items()))
    return (f"different prompt templates: {say(a)} (baseline) vs {say(b)} (candidate): the same bench flags "
            "sent differently templated prompts (vLLM 0.34 leaves the chat backend's prompts to the server), "
            "not one workload")


# ------------------------------------------------------------------ the whole comparison
@dataclass
class Comparison:
    base: Side
    cand: Side
    metrics: list[str]           # what cells are judged on (an open-loop cell skips throughput)
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
    goodput: list[GoodputDiff] = field(default_factory=list)   # when both plans have an SLO (goodput_diffs)
    slo: str = ""                                              # the SLO goodput was judged by, in words
    family: int = 0                                            # figures tested together (Holm)
    rates: list[list[str]] = field(default_factory=list)       # open-loop cells: rate_rows
    single_run_threshold: bool = False                         # single runs judged on the plain threshold

    @property
    def simulated(self) -> bool:
        return bool(simulated_signals(self.base.camp) or simulated_signals(self.cand.camp))

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
    def undecidable(self) -> list[str]:
        """What could not be judged (one run on a side), by name."""
        out = [f"{d.config} @ {d.cell} {GATE_METRICS[d.metric]}" for d in self.cells if d.verdict == UNDECIDABLE]
        out += [f"{s.config} @ {s.cell} speedup" for s in self.speedups if s.verdict == UNDECIDABLE]
        return out + [f"{g.config} @ {g.cell} goodput" for g in self.goodput if g.verdict == UNDECIDABLE]

    @property
    def assertions_failed(self) -> list[AssertionResult]:
        return [a for a in self.assertions if not a.ok]


def narrowed_metrics(metric: str | list[str] | None) -> list[str] | None:
    """--metric: one gate metric or several, comma-separated; None: what users feel (judged_metrics)."""
    if not metric:
        return None
    names = [m.strip() for m in metric.split(",")] if isinstance(metric, str) else list(metric)
    for m in names:
        if m not in GATE_METRICS:
            raise UserError(f"--metric {m!r}: one of {', '.join(GATE_METRICS)} (several: comma-separated)")
    return names


def compare_dirs(baseline: Path | str, candidate: Path | str, *, metric: str | list[str] | None = None,
                 tolerance_pct: float | None = None, force: bool = False,
                 single_run_threshold: bool = False) -> Comparison:
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
    narrowed = narrowed_metrics(metric)
    plan_metric = ((cand.plan or {}).get("equivalence") or {}).get("metric") or PLAN_DEFAULTS.metric
    metrics = judged_metrics(plan_metric, narrowed, False)
    noise = NoiseBand(cand.gate.rule.tolerance_pct)
    cells, figures, unmatched = cell_diffs(base, cand, narrowed, plan_metric, noise)
    unjudged = sorted({r.cell for r in cand.camp.runs if open_loop(r.cell)} - {d.cell for d in cells})
    if unjudged:
        unmatched.append(f"open-loop cell(s) {', '.join(unjudged)} not judged: --metric names only throughput, "
                         "which is the offered load there (judge them on TTFT or the per-token metric)")
    speedups, sfig = speedup_diffs(base, cand, noise)
    compared, other = plan_diffs(base, cand)
    cmp = Comparison(base, cand, metrics, noise, force and bool(refused or not base.gate.passed or not cand.gate.passed),
                     refused, provenance_diffs(base, cand), compared, other, cells, unmatched,
                     speedups, check(cand.assertions, cand.tables.runs.to_dict("records")),
                     single_run_threshold=single_run_threshold)
    figures += sfig
    slo, said = slo_of_both(base.plan, cand.plan)
    cmp.notes += said
    if slo is not None:
        cmp.goodput, gfig, missing = goodput_diffs(base.camp, cand.camp, slo, noise,
                                                   {**_conc(base.camp), **_conc(cand.camp)})
        figures += gfig
        cmp.slo, cmp.notes = f"{slo.describe()}; meets it: >= {slo.attainment_pct:g} % of requests good", cmp.notes + missing
    cmp.family = settle(figures, noise, single_run_threshold)
    cmp.rates = rate_rows(base, cand)
    cmp.notes += [f"{r[0]} @ {r[1]}: a side did not sustain its offered rate (baseline {r[3]}, candidate {r[5]}): "
                  "its TTFT and TPOT measure a growing queue" for r in cmp.rates if "NOT SUSTAINED" in r[3] + r[5]]
    for g in cmp.goodput:
        if g.method == ZERO_METHOD:
            g.judged = g.attainment
    for s in (base, cand):
        if s.plan is None:
            cmp.notes.append(f"{s.dir}: no {PLAN_SNAPSHOT} (fab collect / fab report write it): plan differences "
                             f"not checked, baseline configuration taken as '{s.baseline}'")
        if not s.gate.passed:
            cmp.notes.append(f"{s.label}: NODES NOT EQUIVALENT (compared with --force)")
        cmp.notes += [f"{s.label}: left out: {q.source}: {q.reason}" for q in s.camp.quarantined]
        cmp.notes += [f"{s.label}: left out: {p}: no done marker" for p in s.camp.pending]
    if not cells:
        cmp.notes.append("no bench cell is in both campaigns: nothing to compare")
    return cmp
