"""Columns that say what they mean, added to the merged runs table: the speedup and its noise band
(the point is the ratio of geometric means, the centre of its interval on the log scale, so the
interval always holds it), drafts per decode step, the acceptance flag, latency percentiles,
outliers and what a repeat is. docs/report.md explains every column ("The noise band",
"Degenerate acceptance").
"""
from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass

import pandas as pd

from ..scan.folder import CollectedFolder
from .diagnosis import LOOP_SHARE_DEGENERATE
from ..gates.gate import EquivalenceRule, open_loop
from ..gates.gate_policy import metric_value
from ...worker.crossover import speedup_verdict
from ...worker.stats import SPEEDUP_CONFIDENCE, geometric_ratio, log_welch, ratio_interval, t_two_sided_p

SINGLE_RUN = "single run: plain threshold, no interval"
INTERVAL_METHOD = "95 % CI, Welch's t on log values"
PCT_KEY = re.compile(r"^p(\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms\Z")
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")

# The acceptance rule, in one place (docs/report.md, "Degenerate acceptance"). k = the tokens
# proposed per draft, draft tokens / drafts (n-gram proposes up to num_speculative_tokens, fewer
# when the match is short: 2.74 of 4 on the H200 fixture), so a draft kept whole gives an
# acceptance length of k + 1.
#: DEGENERATE: rate >= this and length >= (k + 1) x (1 - DEGENERATE_LENGTH_SLACK). No trained model
#: keeps every drafted token on real prompts (SmolLM2-135M on Spec-Bench: 52-61 %); 100 % with
#: length k + 1 is a model that repeats itself under greedy decoding (random weights loop), so
#: the drafts are copies of the loop and the "speedup" measures the loop.
DEGENERATE_RATE_PCT = 99.0
DEGENERATE_LENGTH_SLACK = 0.02
#: NEAR-ZERO: rate below this with drafts > 0: the target rejects what the drafter proposes (an
#: EAGLE-3 drafter with random weights: 0 %); fewer than 1 drafted token in 20 kept is no
#: speculator at work, so its speed figure is the cost of drafting for nothing.
NEAR_ZERO_RATE_PCT = 5.0
#: DEGENERATE from the counters alone, whatever the texts: not one drafted token rejected over at least
#: this many, with whole drafts kept. A drafter that keeps 99 % of tokens (beyond any trained one) rejects
#: none of 300 with probability 0.99^300 = 4.9 %, so no trained drafter does it; a loop does, whether or
#: not the saved texts happen to show the loop (issue 39: 100 % at length k + 1 over 1,100 drafts).
NEVER_REJECTED_MIN_TOKENS = 300
DEGENERATE, NEAR_ZERO = "DEGENERATE ACCEPTANCE", "NEAR-ZERO ACCEPTANCE"
ACCEPTANCE_FLAGS = (DEGENERATE, NEAR_ZERO)


@dataclass(frozen=True)
class NoiseBand:
    """What counts as a measurable speedup (docs/report.md, "The noise band"). The tolerance is
    the gate's: what the nodes may differ by is also what one run may differ by."""
    tolerance_pct: float = EquivalenceRule.tolerance_pct
    confidence: float = SPEEDUP_CONFIDENCE

    @property
    def band(self) -> tuple[float, float]:
        return EquivalenceRule(tolerance_pct=self.tolerance_pct).band  # the gate's band, one formula

    def describe(self) -> str:
        lo, hi = self.band
        return (f"faster/slower only outside the ±{self.tolerance_pct:g} % band [{lo:.3f}x, {hi:.3f}x] (the "
                f"minimum effect of interest, with 1 run or 10) and, with repeats, only when the "
                f"{self.confidence:.0%} interval of the speedup (Welch's t on log output tok/s, repeats of the "
                f"configuration and of the same node's baseline) excludes 1.00x ({SINGLE_RUN} otherwise); "
                "else: no measurable difference")


def missing(v) -> bool:
    """None or NaN: a value the table does not have."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def evidence(r: pd.Series, noise: NoiseBand) -> str:
    """'1.830x, interval [1.790x, 1.870x] (method)' or '1.025x; single run: plain threshold, ...'."""
    if missing(r.get("speedup_ci_low")):
        lo, hi = noise.band
        return f"{r.speedup:.3f}x; {SINGLE_RUN}: ±{noise.tolerance_pct:g} % band [{lo:.3f}x, {hi:.3f}x]"
    return (f"{r.speedup:.3f}x, interval [{r.speedup_ci_low:.3f}x, {r.speedup_ci_high:.3f}x] "
            f"({r.speedup_method})")


#: an open-loop cell's speedup: at a set request rate output tok/s is the offered load on both sides
#: (~1.00x whatever the speed below saturation), so the speedup there is the per-token one
OPEN_LOOP_SPEEDUP = "open loop: baseline / configuration token-weighted TPOT (output tok/s is the offered load)"


def speed(res, cell: str) -> float:
    """The figure a speedup is the ratio of: output tok/s, or 1 / token-weighted TPOT in an open-loop cell."""
    if open_loop(cell):
        tpot = metric_value(res, "tpot_weighted_ms")
        return 1000.0 / tpot if tpot and tpot > 0 else math.nan
    return float(res.output_throughput)


def speedup_noise(camp: CollectedFolder, runs: pd.DataFrame, baseline: str, noise: NoiseBand) -> pd.DataFrame:
    """Sets speedup to the ratio of geometric means (the interval's centre) and adds speedup_ci_low,
    speedup_ci_high, speedup_method, speedup_verdict. An open-loop cell's is per token (speed)."""
    # keyed by bench cell: a sweep has several cells per concurrency
    s = {k: [speed(r.result, k[0]) for r in runs] for k, runs in camp.groups().items()}
    points, lows, highs, methods, verdicts, pvalues = [], [], [], [], [], []
    for _, r in runs.iterrows():
        base = s.get((r.cell, baseline, r.node))
        cfg = s.get((r.cell, r.config, r.node))
        point = geometric_ratio(base or [], cfg or []) if r.speedup == r.speedup else math.nan
        point = r.speedup if r.config == baseline or point != point else point  # no log: the plain ratio
        points.append(point)
        if r.config == baseline or not base or not cfg or point != point:
            lows.append(math.nan), highs.append(math.nan), methods.append(""), verdicts.append("")
            pvalues.append(math.nan)
            continue
        pvalues.append(speedup_p(base, cfg))
        ri = ratio_interval(base, cfg, noise.confidence)
        lo, hi = (math.nan, math.nan) if ri is None else (ri.low, ri.high)
        lows.append(lo), highs.append(hi)
        methods.append((SINGLE_RUN if ri is None else f"{INTERVAL_METHOD}, n={len(cfg)}/{len(base)}")
                       + (f"; {OPEN_LOOP_SPEEDUP}" if open_loop(r.cell) else ""))
        verdicts.append(speedup_verdict(point, ri, noise.band))  # the crossover search's rule too
    out = runs.copy()
    out["speedup"] = points
    out["speedup_ci_low"], out["speedup_ci_high"] = lows, highs
    out["speedup_method"], out["speedup_verdict"] = methods, verdicts
    out["speedup_p"] = pvalues
    return out


def speedup_p(base: list[float], cfg: list[float]) -> float:
    """Two-sided p of "speedup = 1.00x" (Welch's t on log values, the interval's own test: p < 0.05 iff
    the 95 % interval excludes 1.00x); NaN with one run a side. The crossover's Holm correction over a
    sweep's points reads it (crossover_curve.holm_verdicts)."""
    w = log_welch(base, cfg)
    if w is None:
        return math.nan
    d, se2, df = w
    if se2 == 0:
        return 0.0 if d != 0 else 1.0
    return t_two_sided_p(d / math.sqrt(se2), df)


def drafts_per_step(runs: pd.DataFrame) -> pd.Series:
    """drafts / (output tokens - accepted tokens): the share of (request, decode step) pairs that
    drafted (a step emits one token plus those accepted in it, so output - accepted counts the steps;
    field report n-gram 6/4-6: 429 / (8,159 - 670) = 5.7 %); NaN without spec keys or output tokens."""
    steps = (runs["output_tokens"] - runs["accepted_tokens"].fillna(0)).where(lambda x: x > 0)
    return runs["drafts"] / steps


def acceptance_flag(r: pd.Series | dict) -> str:
    """DEGENERATE / NEAR_ZERO / "" for one merged row (drafts > 0 needed: no draft, no flag)."""
    def num(k):
        v = r.get(k)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else math.nan
    drafts, dtok, rate, alen, loops = (num(k) for k in ("drafts", "draft_tokens", "acceptance_rate_pct",
                                                          "acceptance_length", "loop_share_pct"))
    if not drafts > 0 or math.isnan(rate):
        return ""
    if rate < NEAR_ZERO_RATE_PCT:
        return NEAR_ZERO
    k = dtok / drafts
    whole = alen >= (k + 1) * (1 - DEGENERATE_LENGTH_SLACK)
    if not math.isnan(loops):  # the outputs are there: a loop is read from them, and the counters count too
        never_rejected = rate >= 100.0 - 1e-9 and dtok >= NEVER_REJECTED_MIN_TOKENS and whole
        return DEGENERATE if loops >= 100 * LOOP_SHARE_DEGENERATE or never_rejected else ""
    if rate >= DEGENERATE_RATE_PCT and whole:
        return DEGENERATE
    return ""


def _mean(vals: list) -> float:
    vals = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(vals) / len(vals) if vals else math.nan


def percentile_columns(camp: CollectedFolder) -> list[str]:
    """`p<P>_<metric>_ms` keys present in any result, ordered by metric then P."""
    declared = [k for k in type(camp.runs[0].result).model_fields if PCT_KEY.match(k)] if camp.runs else []
    keys = {k for r in camp.runs for k in [*r.result.extra, *declared]
            if PCT_KEY.match(k) and getattr(r.result, k, None) is not None}
    return sorted(keys, key=lambda k: (LATENCY_METRICS.index(PCT_KEY.match(k)[2]), float(PCT_KEY.match(k)[1])))


def latency_table(camp: CollectedFolder, runs: pd.DataFrame) -> pd.DataFrame:
    """Per (conc, config, node): mean TTFT/E2EL and every collected percentile (means over
    repeats), with output tokens per run."""
    cols = ["mean_e2el_ms", *percentile_columns(camp)]
    groups = camp.groups()
    rows = []
    for _, r in runs.iterrows():
        res = [run.result for run in groups.get((r.cell, r.config, r.node), [])]
        row = {"concurrency": r.concurrency, "cell": r.cell, "config": r.config, "node": r.node,
               "repeats": r.repeats, "output_tokens": r.output_tokens, "ttft_ms": r.ttft_ms}
        for c in cols:
            row[c] = _mean([getattr(x, c, None) for x in res])
        rows.append(row)
    return pd.DataFrame(rows, columns=["concurrency", "cell", "config", "node", "repeats", "output_tokens",
                                       "ttft_ms", *cols])


def add_measures(camp: CollectedFolder, runs: pd.DataFrame, baseline: str, noise: NoiseBand) -> pd.DataFrame:
    out = speedup_noise(camp, runs, baseline, noise)
    out["drafts_per_step"] = drafts_per_step(out)
    out["acceptance_flag"] = [acceptance_flag(r) for _, r in out.iterrows()] if len(out) else pd.Series(dtype=str)
    return out


def _label(col: str) -> str:
    if col == "mean_e2el_ms":
        return "E2EL mean ms"
    m = PCT_KEY.match(col)
    return f"{m[2].upper()} p{m[1]} ms" if m else col


def latency_sections(lat: pd.DataFrame | None) -> list[tuple[str, pd.DataFrame, list, str]]:
    """(title, rows, columns as render._section takes them, note) per concurrency."""
    if lat is None or lat.empty:
        return []
    cols = [("config", "config", -1, ""), ("node", "node", -1, ""), ("repeats", "runs", 0, ""),
            ("output_tokens", "out tokens/run", 0, ""), ("ttft_ms", "TTFT mean ms", 2, "")]
    cols += [(c, _label(c), 2, "") for c in lat.columns[7:]]
    note = ("Per request latencies as vllm bench serve reports them (means over runs of each run's "
            "percentile): TTFT = time to first token, TPOT = time per output token after the first, "
            "ITL = gap between streamed chunks, E2EL = request latency. '–' = the result files do not "
            "carry it (set by --percentile-metrics / --metric-percentiles). Unequal out tokens/run "
            "means the configurations generated different lengths.")
    return [(f"Latency percentiles {cell_title(lat[lat.cell == cell])}", lat[lat.cell == cell], cols, note)
            for cell in cell_order(lat)]


def cell_order(df: pd.DataFrame) -> list[str]:
    """The bench cells of a table, by concurrency, then name (one section each)."""
    return list(dict.fromkeys(df.sort_values(["concurrency", "cell"]).cell))


def cell_title(rows: pd.DataFrame) -> str:
    """'at concurrency 16' for a plain cell, 'at concurrency 16, cell conc16-out1024' for a swept one."""
    conc, cell = int(rows.concurrency.iloc[0]), str(rows.cell.iloc[0])
    return f"at concurrency {conc}" + ("" if cell == f"conc{conc}" else f", cell {cell}")


OUTLIER_PCT = 10.0   # a repeat this far from the median of the others ...
OUTLIER_SPREAD = 3.0  # ... and this many times farther than the others stand from that median


def outlier_notes(camp: CollectedFolder) -> list[str]:
    """One note per repeat that stands far from the others of its (cell, config, node): >= 3 runs, its
    output tok/s more than OUTLIER_PCT % from the median of the others, and more than OUTLIER_SPREAD
    times the others' own largest distance from that median. It stays in the means and intervals
    (nothing is dropped); the note says which file to look at."""
    out = []
    for (cell, cfg, host), runs in sorted(camp.groups().items()):
        if len(runs) < 3:
            continue
        for r in runs:
            others = [float(x.result.output_throughput) for x in runs if x is not r]
            med = statistics.median(others)
            if med <= 0:
                continue
            dev = abs(float(r.result.output_throughput) / med - 1) * 100
            spread = max(abs(o / med - 1) * 100 for o in others)
            if dev > OUTLIER_PCT and dev > OUTLIER_SPREAD * spread:
                out.append(f"outlier: {r.path.name} on {host} ({cfg}, {cell}) has {r.result.output_throughput:,.2f} "
                           f"output tok/s, {dev:.0f} % from the median {med:,.2f} of its other {len(others)} "
                           f"repeats (they lie within {spread:.1f} % of it); it is kept in the mean and the "
                           "interval, which it widens: look at that run (a neighbour, a thermal limit, a restart)")
    return out


#: what a run's isolation (its record's, RunRecord.isolation: how a repeat was kept apart from the
#: others; results without a record: resultfile/legacy.py) means for an interval
REPEAT_MEANING = {
    "server-start": "each repeat on its own server start, the baseline and the configurations interleaved "
                    "(baseline r1, configuration r1, baseline r2, ...): the interval holds run-to-run, "
                    "server-start and slow-drift variance",
    "cache-reset": "the repeats of a configuration back to back on one server start (server.prefix_cache "
                   "between runs), its baseline on another start at another time: the interval holds "
                   "run-to-run variance only, not server-start or drift variance, so it is narrower than "
                   "independent starts would give",
}


def repeat_meaning(camp: CollectedFolder) -> str | None:
    """What the intervals' repeats are, read from the results (benchmark.repeat_isolation), or None when
    no cell has more than one run."""
    seen = Counter(str(r.record.isolation if r.record and r.record.isolation else "not recorded")
                   for runs in camp.groups().values() if len(runs) > 1 for r in runs)
    if not seen:
        return None
    if len(seen) == 1:
        how = next(iter(seen))
        return f"Repeats: {how}, {REPEAT_MEANING.get(how, 'not a known isolation')}."
    parts = "; ".join(f"{n} runs {how} ({REPEAT_MEANING.get(how, 'not a known isolation')})"
                      for how, n in sorted(seen.items()))
    return (f"Repeats isolated in more than one way (added gate runs are server starts of their own): {parts}. "
            "An interval over both mixes the two meanings.")


#: an open-loop run kept up with its rate when it ended within this share of the time a server that
#: keeps up takes (its arrivals' span, then one unloaded request); beyond it a backlog grew
SUSTAIN_SLACK = 0.10


@dataclass(frozen=True)
class RateCheck:
    """Offered vs achieved rate of one open-loop run (docs/report.md, "Open-loop cells")."""
    offered: float          # requests/s asked for (--request-rate)
    achieved: float         # completed / duration
    duration_s: float
    expected_s: float       # what a server that keeps up takes: the arrivals' span + one unloaded request
    sustained: bool
    how: str                # where the span came from
    capped: int | None      # a client cap (--max-concurrency) the run had: its queueing is outside TTFT

    def describe(self) -> str:
        word = "sustained" if self.sustained else "NOT SUSTAINED"
        return (f"{word}: achieved {self.achieved:.3g} of {self.offered:g} req/s offered, run {self.duration_s:.1f} s "
                f"vs {self.expected_s:.1f} s for a server that keeps up ({self.how})")


def rate_check(res) -> RateCheck | None:
    """None for a closed-loop run. The arrivals' span is the measured one (start_times) where the client
    had no cap, else the 97.5 % upper end of the gamma arrivals' span ((n-1)/rate x (1 + 2 / sqrt((n-1)
    x burstiness)), so chance alone does not read as a backlog); one unloaded request is the fastest
    request of the run (latencies), else its TPOT x output tokens."""
    rate = res.request_rate
    if rate is None or not math.isfinite(rate) or rate <= 0 or not res.completed or not res.duration:
        return None
    n = res.completed + (res.failed or 0)
    starts = [t for t in (res.start_times or []) if isinstance(t, (int, float))]
    if len(starts) >= 2 and not res.max_concurrency:
        span, how = max(starts) - min(starts), "arrival span measured"
    else:
        shape = res.burstiness or 1.0
        span = (n - 1) / rate * (1 + 2 / math.sqrt((n - 1) * shape)) if n > 1 else 0.0
        how = "arrival span: upper 97.5 % of the arrival process"
    lat = [x for x in (res.latencies or []) if isinstance(x, (int, float)) and x > 0]
    one = min(lat) if lat else res.mean_tpot_ms * max((res.total_output_tokens or 0) / res.completed - 1, 0) / 1000
    expected = span + one
    return RateCheck(float(rate), res.completed / res.duration, float(res.duration), expected,
                     res.duration <= expected * (1 + SUSTAIN_SLACK), how, res.max_concurrency or None)


def rate_notes(camp: CollectedFolder) -> list[str]:
    """One line per open-loop run that could not sustain its rate, or whose client capped its
    requests in flight (results from before the cap was dropped: coordinated omission)."""
    out = []
    for r in sorted(camp.runs, key=lambda r: (r.cell, r.config, r.host, r.path.name)):
        chk = rate_check(r.result)
        if chk is None:
            continue
        if not chk.sustained:
            out.append(f"{r.path.name} on {r.host} ({r.config}, {r.cell}): {chk.describe()}: its latencies "
                       "measure a growing queue, not the latency at that rate")
        if chk.capped:
            out.append(f"{r.path.name} on {r.host} ({r.config}, {r.cell}): the client capped requests in flight "
                       f"at {chk.capped} (--max-concurrency with --request-rate): a request held back waited "
                       "outside its TTFT (coordinated omission), so TTFT is too low where the cap was reached")
    return out


def rate_summary(camp: CollectedFolder) -> dict[str, str]:
    """Open-loop cell -> offered vs achieved rate over its runs, for the cell's Results table note."""
    by_cell: dict[str, list[RateCheck]] = {}
    for r in camp.runs:
        if (chk := rate_check(r.result)) is not None:
            by_cell.setdefault(r.cell, []).append(chk)
    out = {}
    for cell, checks in by_cell.items():
        short = sum(not c.sustained for c in checks)
        out[cell] = (f"Open loop: offered {checks[0].offered:g} req/s, achieved {min(c.achieved for c in checks):.3g}-"
                     f"{max(c.achieved for c in checks):.3g} req/s over {len(checks)} run(s); "
                     + (f"{short} NOT SUSTAINED (see the notes)" if short else "every run sustained its rate")
                     + "; the speedup here is per token (output tok/s is the offered load).")
    return out

