"""Conclusions in words, computed from the merged tables.

Rules (documented in docs/report.md, "Conclusions" and "The noise band"): a
configuration is called faster or slower than the baseline only when the
interval of its speedup excludes 1.00x (with single runs: when the speedup is
outside the gate's tolerance band); otherwise "no measurable difference", and
every such statement names its method and interval. "Best" is the highest
speedup among the measurably faster ones. A configuration whose acceptance is
flagged (measures.acceptance_flag: DEGENERATE / NEAR-ZERO ACCEPTANCE, docs/report.md
"Degenerate acceptance") is never faster, slower or best: one line says what it
is, with its speed figure as what it measures, and it is left out of the rest. Speculation "rarely fires" below
RARE_DRAFTS_PER_STEP drafts per decode step; acceptance is "low" below
LOW_ACCEPT_LEN tokens per draft.
"""
from __future__ import annotations

import math

import pandas as pd

from .crossover import crossover_lines
from .measures import DEGENERATE, NoiseBand, cell_order, evidence, missing
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
    return (f"**{r.config}** on {r.node} is tail-dominated: {thr:.3f}x on output throughput but "
            f"{tpot:.3f}x on token-weighted TPOT (beyond {tol_pct:g} %); the throughput is set by the last requests of a "
            "wave that drains, not by the per-token speed: judge by TPOT, or measure a steady state "
            "(more prompts per concurrency)")


def flagged_line(r: pd.Series, noise: NoiseBand) -> str:
    """What a flagged configuration is instead of faster or slower (the rule: measures.py)."""
    k = r.draft_tokens / r.drafts
    speed = ("" if missing(r.get("speedup")) else
             f"; its {r.speedup:.2f}x the baseline ({evidence(r, noise)}) measures that, not speculative decoding")
    if r.acceptance_flag == DEGENERATE and not missing(r.get("loop_share_pct")):
        what = (f"{_f(r.loop_share_pct, 0)} % of its requests loop (the tail of the generated text repeats one "
                f"phrase; {_f(r.acceptance_rate_pct, 1)} % of drafted tokens accepted): n-gram drafting copies "
                "the loop, so the figure measures the loop")
    elif r.acceptance_flag == DEGENERATE:
        what = (f"{_f(r.acceptance_rate_pct, 1)} % of drafted tokens accepted, acceptance length "
                f"{_f(r.acceptance_length)} = 1 + the {k:.2f} tokens proposed per draft: every draft is kept "
                "whole, typical of a model that loops under greedy decoding (random weights)")
    else:
        what = (f"{_f(r.acceptance_rate_pct, 1)} % of {_f(r.draft_tokens, 0)} drafted tokens accepted in "
                f"{_f(r.drafts, 0)} drafts (acceptance length {_f(r.acceptance_length)}): the target rejects "
                "what the drafter proposes (e.g. a drafter with random weights: the plumbing ran, the "
                "figure says nothing of a trained drafter)")
    return f"**{r.config}** on {r.node}: {r.acceptance_flag}, not a speedup: {what}{speed}"


def _base_row(runs: pd.DataFrame, baseline: str, node: str, cell: str) -> pd.Series | None:
    b = runs[(runs.config == baseline) & (runs.node == node) & (runs.cell == cell)]
    return None if b.empty else b.iloc[0]


def conclusions(t: Tables, baseline: str) -> list[str]:
    runs = t.runs
    noise = t.noise or NoiseBand()
    out: list[str] = []
    if runs.empty:
        return ["No valid runs were merged."]
    out.append(f"Noise band: {noise.describe()}.")
    best_by_conc: dict[tuple[int, str], tuple[str, float]] = {}
    for cell in cell_order(runs):  # a plan without bench sweeps: one cell per concurrency
        at = runs[runs.cell == cell]
        conc = f"{at.concurrency.iloc[0]}" + ("" if cell == f"conc{at.concurrency.iloc[0]}" else f" (cell {cell})")
        others = runs[(runs.cell == cell) & (runs.config != baseline)]
        if others.empty:
            out.append(f"Concurrency {conc}: only the baseline ran.")
            continue
        flagged = others[others.acceptance_flag != ""]
        for _, r in flagged.iterrows():
            out.append(f"Concurrency {conc}: {flagged_line(r, noise)}.")
        if len(flagged) == len(others):
            continue
        cand = others[(others.acceptance_flag == "") & others.speedup.notna()]
        if cand.empty:
            out.append(f"Concurrency {conc}: no configuration with a same-node '{baseline}' run to compare.")
            continue
        faster = cand[cand.speedup_verdict == "faster"]
        if not faster.empty:
            best = faster.loc[faster.speedup.idxmax()]
            b = _base_row(runs, baseline, best.node, cell)
            best_by_conc[(int(at.concurrency.iloc[0]), conc)] = (best.config, best.speedup)
            out.append(
                f"Concurrency {conc}: best is **{best.config}** at {best.speedup:.2f}x the baseline on "
                f"{best.node} ({_f(b.output_tok_s)} -> {_f(best.output_tok_s)} output tok/s, "
                f"TPOT {_f(b.tpot_ms)} -> {_f(best.tpot_ms)} ms, duration {_f(b.duration_s)} -> "
                f"{_f(best.duration_s)} s; {evidence(best, noise)}).")
            dt = best.ttft_ms - b.ttft_ms
            what = "TTFT cost" if dt > 0 else "TTFT (no cost: lower or equal)"
            out.append(
                f"Concurrency {conc}: {what} of {best.config}: {_f(b.ttft_ms)} -> {_f(best.ttft_ms)} ms "
                f"({dt:+.2f} ms, {100 * dt / b.ttft_ms:+.0f} %).")
            for _, r in faster.drop(index=best.name).iterrows():
                out.append(f"Concurrency {conc}: {r.config} on {r.node} is also faster than the baseline "
                           f"({evidence(r, noise)}).")
        else:
            top = cand.loc[cand.speedup.idxmax()]
            out.append(f"Concurrency {conc}: no configuration is measurably faster than '{baseline}' "
                       f"(highest: {top.config} at {evidence(top, noise)}).")
        for _, r in cand[cand.speedup_verdict == "no measurable difference"].iterrows():
            out.append(f"Concurrency {conc}: {r.config} on {r.node}: no measurable difference from the "
                       f"baseline ({evidence(r, noise)}).")
        for _, r in cand[cand.speedup_verdict == "slower"].iterrows():
            b = _base_row(runs, baseline, r.node, cell)
            tpot = _wtpot(b) / _wtpot(r) if _wtpot(r) else float("nan")
            if (tail_dominated(r, b, noise.tolerance_pct) and not math.isnan(tpot)
                    and abs(tpot - 1) * 100 <= noise.tolerance_pct):
                # a draining wave: throughput follows the last request; TPOT contradicts a per-step cost
                why = (f"on output throughput only: its TPOT is {tpot:.3f}x the baseline's, no measurable "
                       "difference, so the slowdown is the tail of a wave that drains, not a per-step "
                       "overhead (measure a steady state to tell)")
            else:
                why = slow_reason(r) if not t.overhead_bound.get(r.node) else (
                    f"{t.overhead_bound[r.node]}; {slow_reason(r)}")
            out.append(f"Concurrency {conc}: **{r.config}** on {r.node} is SLOWER than the baseline "
                       f"({evidence(r, noise)}): {why}.")
        for _, r in cand.iterrows():
            tail = tail_dominated(r, _base_row(runs, baseline, r.node, cell), noise.tolerance_pct)
            if tail:
                out.append(f"Concurrency {conc}: {tail}.")
        itl = []
        for _, r in cand.iterrows():
            b = _base_row(runs, baseline, r.node, cell)
            if r.itl_ms > b.itl_ms and r.tpot_ms < b.tpot_ms:
                itl.append(f"{r.config} on {r.node} (ITL {_f(b.itl_ms)} -> {_f(r.itl_ms)} ms, "
                           f"TPOT {_f(b.tpot_ms)} -> {_f(r.tpot_ms)} ms)")
        if itl:
            out.append(f"Concurrency {conc}: ITL caveat: {'; '.join(itl)} show higher ITL but lower TPOT "
                       "than the baseline. One streamed chunk carries several accepted tokens, so ITL "
                       "measures gaps between chunks, not tokens: judge by TPOT and output tok/s.")
    cfgs = {c for c, _ in best_by_conc.values()}
    if len(best_by_conc) > 1 and len(cfgs) == 1 and len(best_by_conc) == runs.cell.nunique():
        cfg = cfgs.pop()
        trend = ", ".join(f"{s:.2f}x at conc {c[1]}" for c, (_, s) in sorted(best_by_conc.items()))
        out.append(f"{cfg} is best at every concurrency measured ({trend}).")
    out += t.outliers
    out += [f"{why[0].upper()}{why[1:]}." for why in t.overhead_bound.values()]
    out += diagnosis_lines(runs, baseline)
    out += crossover_lines(runs[runs.acceptance_flag == ""], baseline, noise, t.search)  # where each configuration stops paying (crossover.py)
    versions = {v for v in t.provenance.vllm if v}
    if len(versions) > 1:
        out.append(f"WARNING: nodes ran different vLLM versions ({', '.join(sorted(versions))}).")
    return out


def diagnosis_lines(runs: pd.DataFrame, baseline: str) -> list[str]:
    """Caveats read from the files (diagnosis.py): loops in the outputs, greedy outputs that differ."""
    out = []
    for _, r in runs.iterrows():
        if not missing(r.get("loop_share_pct")) and r.loop_share_pct > 0 and r.config != baseline \
                and not r.get("acceptance_flag"):  # a flagged row's own line says it
            out.append(f"Concurrency {r.concurrency}: {_f(r.loop_share_pct, 0)} % of {r.config}'s requests on {r.node} "
                       "loop (the tail of the generated text repeats one phrase); n-gram drafts copy a loop, so "
                       "part of its acceptance measures the loop")
        if not missing(r.get("greedy_differs_pct")) and r.greedy_differs_pct > 0:
            out.append(f"Concurrency {r.concurrency}: greedy decoding on both sides, yet {_f(r.greedy_differs_pct, 0)} % "
                       f"of {r.config}'s outputs on {r.node} differ from '{baseline}''s for the same prompt "
                       "(speculative decoding is lossless under greedy decoding: batch-dependent numerics, or a loop "
                       "entered at another token)")
    return out
