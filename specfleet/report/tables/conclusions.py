"""The report's caveats in words, computed from the merged tables (docs/report.md, "Conclusions": the
groups and their rules). The verdicts are the summary matrix's (document.summary_section); these
bullets only say what a verdict does not, and none restates a number the matrix shows.
"""
from __future__ import annotations

import math

import pandas as pd

from .crossover_curve import crossover_lines
from .diagnosis import LOOP_SHARE_DEGENERATE
from .measures import DEGENERATE, NoiseBand, cell_order, missing
from .merge import Tables

RARE_DRAFTS_PER_STEP = 0.10
LOW_ACCEPT_LEN = 1.5


def _f(v: float, nd: int = 2) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{nd}f}"


def slow_reason(row: pd.Series) -> str:
    if not row.get("has_spec_keys", False):
        return ("the result has no spec_decode_* keys: no draft was made in the measured window "
                "(speculation never fired, or the server ran without a speculative config)")
    dps, alen, rate = row["drafts_per_step"], row["acceptance_length"], row["acceptance_rate_pct"]
    if not missing(dps) and dps < RARE_DRAFTS_PER_STEP:
        return (f"speculation rarely fires: {_f(row['drafts'], 0)} drafts in "
                f"{_f(row['output_tokens'] - row['accepted_tokens'], 0)} decode steps "
                f"({_f(100 * dps, 1)} % of steps; output tokens - accepted tokens = steps); when it "
                f"fires the acceptance length is {_f(alen, 3)}, so the per-step overhead is paid on the "
                "other steps for nothing")
    if not missing(alen) and alen < LOW_ACCEPT_LEN:
        return (f"low acceptance: acceptance length {_f(alen, 3)} (rate {_f(rate, 1)} %), most drafted "
                "tokens are rejected and verification costs more than it saves")
    return (f"drafting and verification overhead exceeds the gain (acceptance length {_f(alen, 3)}, "
            f"rate {_f(rate, 1)} %, drafts in {_f(100 * dps, 1)} % of decode steps)")


TAIL_TOLERANCE_PCT = 3.0  # the report's noise level (§5.1)


def _wtpot(r: pd.Series) -> float:
    """Token-weighted TPOT (gate_policy.token_weighted_tpot; vLLM's mean TPOT without per-request arrays)."""
    v = r.get("tpot_weighted_ms")
    return float(v) if not missing(v) else float(r.tpot_ms)


def tail_dominated(r: pd.Series, b: pd.Series, tol_pct: float = TAIL_TOLERANCE_PCT) -> str | None:
    """Throughput and TPOT speedups that disagree: the run's throughput is set by its tail.

    With few prompts per concurrency (one wave that drains) the output throughput follows the
    last request, not the per-token speed; TPOT (time per output token, per request) does not.
    """
    if int(r.concurrency) <= 1:  # one request at a time: no wave, nothing drains
        return None
    thr = r.output_tok_s / b.output_tok_s if b.output_tok_s else float("nan")
    rt, bt = _wtpot(r), _wtpot(b)
    tpot = bt / rt if rt else float("nan")
    if math.isnan(thr) or math.isnan(tpot) or abs(thr / tpot - 1) * 100 <= tol_pct:
        return None
    return (f"**{r.config}** on {r.node} is tail-dominated: its speedup on output throughput (the summary's) "
            f"and its {tpot:.3f}x on token-weighted TPOT differ by more than {tol_pct:g} %; the throughput is set by the last requests of a "
            "wave that drains, not by the per-token speed: judge by TPOT, or measure a steady state "
            "(more prompts per concurrency)")


def flagged_line(r: pd.Series) -> str:
    """What a flagged configuration is instead of faster or slower (the rule: measures.py); its speed
    figure stands in the summary matrix, marked 'not a speedup'."""
    k = r.draft_tokens / r.drafts
    if r.acceptance_flag == DEGENERATE and not missing(r.get("loop_share_pct")) and r.loop_share_pct < 100 * LOOP_SHARE_DEGENERATE:
        what = (f"not one of its {_f(r.draft_tokens, 0)} drafted tokens rejected, acceptance length "
                f"{_f(r.acceptance_length)} = 1 + the {k:.2f} tokens proposed per draft: no trained drafter keeps "
                f"every token (one at 99 % rejects none of 300 4.9 % of the time), though only "
                f"{_f(r.loop_share_pct, 0)} % of the saved outputs show a loop")
    elif r.acceptance_flag == DEGENERATE and not missing(r.get("loop_share_pct")):
        what = (f"{_f(r.loop_share_pct, 0)} % of its requests loop (the tail of the generated text repeats one "
                f"phrase; {_f(r.acceptance_rate_pct, 1)} % of drafted tokens accepted): n-gram drafting copies "
                "the loop, so the figure measures the loop")
    elif r.acceptance_flag == DEGENERATE:
        what = (f"{_f(r.acceptance_rate_pct, 1)} % of drafted tokens accepted, acceptance length "
                f"{_f(r.acceptance_length)} = 1 + the {k:.2f} tokens proposed per draft: every draft is kept "
                "whole, typical of a model that loops under greedy decoding (random weights)")
    else:
        cost = (f"it costs {(1 - r.speedup) * 100:.0f} % ({r.speedup:.2f}x the baseline)" if r.speedup < 1
                else f"its {_f(r.speedup)}x is not from drafting (noise, or something else)")
        what = (f"{_f(r.acceptance_rate_pct, 1)} % of {_f(r.draft_tokens, 0)} drafted tokens accepted in "
                f"{_f(r.drafts, 0)} drafts (acceptance length {_f(r.acceptance_length)}): the target rejects "
                "what the drafter proposes, every step pays for drafting and verifying and keeps ~1 token: "
                f"{cost} (e.g. a drafter with random weights: the plumbing ran, the figure says nothing of a "
                "trained drafter)")
        return f"**{r.config}** on {r.node}: {r.acceptance_flag}, a LOSS, not a speedup: {what}"
    return f"**{r.config}** on {r.node}: {r.acceptance_flag}, not a speedup: {what}"


def _base_row(runs: pd.DataFrame, baseline: str, node: str, cell: str) -> pd.Series | None:
    b = runs[(runs.config == baseline) & (runs.node == node) & (runs.cell == cell)]
    return None if b.empty else b.iloc[0]


#: the caveat groups, each line's label (docs/report.md, "Conclusions")
ACCEPTANCE, WHY_SLOWER, TAIL, LATENCY, COST, REPEATS, BOUND, OUTPUTS, CROSSOVER, PROVENANCE = (
    "Acceptance", "Why slower", "Tail", "Latency", "Cost", "Repeats", "Bound", "Outputs", "Across concurrencies",
    "Provenance")


def best_rows(runs: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Per bench cell, the measurably faster unflagged configuration with the highest speedup (the
    summary matrix marks it 'best')."""
    cand = runs[(runs.config != baseline) & (runs.acceptance_flag == "") & runs.speedup.notna()
                & (runs.speedup_verdict == "faster")]
    return cand.loc[cand.groupby("cell").speedup.idxmax()] if not cand.empty else cand


def caveats(t: Tables, baseline: str) -> list[tuple[str, str]]:
    """(group, caveat) pairs: what a verdict of the summary matrix does not say (the module docstring)."""
    runs = t.runs
    noise = t.noise or NoiseBand()
    out: list[tuple[str, str]] = []
    tail_said: set = set()
    for cell in cell_order(runs):  # a plan without bench sweeps: one cell per concurrency
        at = runs[runs.cell == cell]
        conc = f"{at.concurrency.iloc[0]}" + ("" if cell == f"conc{at.concurrency.iloc[0]}" else f" (cell {cell})")
        others = at[at.config != baseline]
        for _, r in others[others.acceptance_flag != ""].iterrows():
            out.append((ACCEPTANCE, f"concurrency {conc}: {flagged_line(r)}"))
        cand = others[(others.acceptance_flag == "") & others.speedup.notna()]
        for _, best in best_rows(cand, baseline).iterrows():
            b = _base_row(runs, baseline, best.node, cell)
            dt = best.ttft_ms - b.ttft_ms
            if dt > 0:
                out.append((COST, f"concurrency {conc}: {best.config} (best) on {best.node} costs TTFT "
                                  f"{_f(b.ttft_ms)} -> {_f(best.ttft_ms)} ms ({100 * dt / b.ttft_ms:+.0f} %)"))
        for _, r in cand[cand.speedup_verdict == "slower"].iterrows():
            b = _base_row(runs, baseline, r.node, cell)
            tpot = _wtpot(b) / _wtpot(r) if _wtpot(r) else float("nan")
            if (tail_dominated(r, b, noise.tolerance_pct) and not math.isnan(tpot)
                    and abs(tpot - 1) * 100 <= noise.tolerance_pct):
                tail_said.add(r.name)
                # a draining wave: throughput follows the last request; TPOT contradicts a per-step cost
                why = (f"on output throughput only: its TPOT is {tpot:.3f}x the baseline's, no measurable "
                       "difference, so the slowdown is the tail of a wave that drains, not a per-step "
                       "overhead (measure a steady state to tell)")
            else:
                why = slow_reason(r) if not t.overhead_bound.get(r.node) else (
                    f"decode on {r.node} is launch/overhead-bound (see '{BOUND}'), where no speculation can pay; "
                    f"{slow_reason(r)}")
            out.append((WHY_SLOWER, f"concurrency {conc}: **{r.config}** on {r.node}: {why}"))
        for _, r in cand.iterrows():
            tail = tail_dominated(r, _base_row(runs, baseline, r.node, cell), noise.tolerance_pct)
            if tail and r.name not in tail_said:   # a slower one's why already says it
                out.append((TAIL, f"concurrency {conc}: {tail}"))
        itl = []
        for _, r in cand.iterrows():
            b = _base_row(runs, baseline, r.node, cell)
            if r.itl_ms > b.itl_ms and r.tpot_ms < b.tpot_ms:
                itl.append(f"{r.config} on {r.node} (ITL {_f(b.itl_ms)} -> {_f(r.itl_ms)} ms, "
                           f"TPOT {_f(b.tpot_ms)} -> {_f(r.tpot_ms)} ms)")
        if itl:
            out.append((LATENCY, f"concurrency {conc}: {'; '.join(itl)} show higher ITL but lower TPOT than "
                                 "the baseline. One streamed chunk carries several accepted tokens, so ITL "
                                 "measures gaps between chunks, not tokens: judge by TPOT and output tok/s"))
    out += [(REPEATS, o) for o in t.outliers]
    out += [(BOUND, f"{why[0].upper()}{why[1:]}") for why in t.overhead_bound.values()]
    out += [(OUTPUTS, d) for d in diagnosis_lines(runs, baseline)]
    # where each configuration stops paying (crossover.py): across concurrencies, not one matrix cell
    out += [(CROSSOVER, c) for c in crossover_lines(runs[runs.acceptance_flag == ""], baseline, noise, t.search)]
    versions = {v for v in t.provenance.vllm if v}
    if len(versions) > 1:
        out.append((PROVENANCE, f"WARNING: nodes ran different vLLM versions ({', '.join(sorted(versions))})"))
    return out


def conclusions(t: Tables, baseline: str) -> list[str]:
    """The report's caveat bullets: 'Group: caveat', grouped, shortest group first and the shortest
    caveat first in each (a reader meets the quick ones first); the verdicts are the summary matrix's."""
    if t.runs.empty:
        return ["No valid runs were merged."]
    groups: dict[str, list[str]] = {}
    for group, text in caveats(t, baseline):
        groups.setdefault(group, []).append(text.rstrip("."))
    ordered = sorted(groups.items(), key=lambda g: (sum(map(len, g[1])), g[0]))
    return [f"{group}: {text}." for group, lines in ordered for text in sorted(lines, key=lambda x: (len(x), x))]


def diagnosis_lines(runs: pd.DataFrame, baseline: str) -> list[str]:
    """Caveats read from the files (diagnosis.py): loops in the outputs, greedy outputs that differ."""
    out = []
    for _, r in runs.iterrows():
        if not missing(r.get("loop_share_pct")) and r.loop_share_pct > 0 and r.config != baseline \
                and not r.get("acceptance_flag"):  # a flagged row's own line says it
            out.append(f"concurrency {r.concurrency}: {_f(r.loop_share_pct, 0)} % of {r.config}'s requests on {r.node} "
                       "loop (the tail of the generated text repeats one phrase); n-gram drafts copy a loop, so "
                       "part of its acceptance measures the loop")
        if not missing(r.get("greedy_differs_pct")) and r.greedy_differs_pct > 0:
            out.append(f"concurrency {r.concurrency}: greedy decoding on both sides, yet {_f(r.greedy_differs_pct, 0)} % "
                       f"of {r.config}'s outputs on {r.node} differ from '{baseline}''s for the same prompt "
                       "(speculative decoding is lossless under greedy decoding: batch-dependent numerics, or a loop "
                       "entered at another token)")
    return out


def answer(runs: pd.DataFrame, baseline: str, gate_verdict: str) -> list[str]:
    """The report's first lines, in plain words (the field report's "conclusion first"): per bench cell
    which configuration to use, its speedup with its interval, what it costs in time to first token,
    then whether the nodes agreed. How each figure is made is said once, below (docs/report.md)."""
    out = []
    best = best_rows(runs, baseline) if "acceptance_flag" in runs else runs.iloc[0:0]
    multi = runs.node.nunique() > 1
    for cell in cell_order(runs):
        rows = runs[runs.cell == cell]
        where = (f"At concurrency {int(rows.concurrency.iloc[0])}"
                 + ("" if cell == f"conc{int(rows.concurrency.iloc[0])}" else f" (cell {cell})"))
        pick = best[best.cell == cell]
        if pick.empty:
            out.append(f"{where}: use **{baseline}**. No configuration is measurably faster than it on the same node.")
            continue
        r = pick.iloc[0]
        lo, hi = r.get("speedup_ci_low"), r.get("speedup_ci_high")
        ci = (f"95 % interval {lo:.2f}x to {hi:.2f}x" if lo == lo and lo is not None and hi == hi
              else f"{int(r.repeats)} run, no interval")
        b = _base_row(runs, baseline, r.node, cell)
        ttft = "time to first token not recorded"
        if b is not None and b.ttft_ms == b.ttft_ms and r.ttft_ms == r.ttft_ms:
            d = r.ttft_ms - b.ttft_ms
            ttft = (f"time to first token {_f(b.ttft_ms, 0)} ms -> {_f(r.ttft_ms, 0)} ms "
                    f"({'+' if d >= 0 else '-'}{_f(abs(d), 0)} ms, mean)")
        out.append(f"{where}: use **{r.config}**: {r.speedup:.2f}x the output tokens per second of {baseline}"
                   f"{f' on {r.node}' if multi else ''} ({ci}); {ttft}.")
    if gate_verdict == "PASSED":
        out.append(f"The nodes agreed: {baseline} measured the same on every node, so their results are merged.")
    elif gate_verdict.startswith("PASSED (UNVERIFIED"):
        why = gate_verdict.removeprefix("PASSED (UNVERIFIED:").rstrip(")").strip()
        out.append(f"Whether the nodes agree is not verified ({why}): their results are merged as they are.")
    elif gate_verdict.startswith("PASSED"):
        out.append(f"The nodes agreed where they could be compared: {gate_verdict}.")
    elif gate_verdict.startswith("NOT CHECKED"):
        out.append(f"Whether the nodes agree was not checked: {gate_verdict.removeprefix('NOT CHECKED').strip(' ()')}.")
    else:
        out.append(f"The nodes were not shown to agree (node equivalence: {gate_verdict}): each speedup compares "
                   "a node with its own baseline; see \"Gate decision\".")
    return out
