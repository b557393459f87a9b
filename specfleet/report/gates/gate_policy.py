"""The gate's policy in one place: a group-sequential equivalence test with stated error rates (issue 23).

TOST on log values (gate.decide -> stats.ratio_interval) looks after LOOKS samples per node (a sample is
a server start: runs sharing one count once, `per_start`), each look
at ALPHA / len(LOOKS) (Bonferroni): by the union bound the chance to pass nodes whose true difference
is beyond the margin stays <= ALPHA at any noise, whatever look the data stop at. The default metric
is the token-weighted TPOT because it does not follow the tail of a wave that drains (output tok/s
does: one late request moves it). docs/report.md, "The equivalence gate", states the metric, the
states and the pass rates benchmarks/gate_power.py measures through gate.decide.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

LOOKS = (3, 5, 8, 12, 16, 20)       # runs per node at which the sequential test looks; the last is the budget
ALPHA = 0.05                          # overall chance to pass nodes beyond the margin (one-sided, per side)
ALPHA_PER_LOOK = ALPHA / len(LOOKS)   # Bonferroni spending
PASSED, FAILED, INCONCLUSIVE, UNVERIFIED = "PASSED", "FAILED", "INCONCLUSIVE", "UNVERIFIED"
MERGES = (PASSED, UNVERIFIED)         # states that let the merge go on
METHOD = (f"group-sequential TOST on log values, looks at {', '.join(map(str, LOOKS))} samples (server starts) "
          "per node, "
          f"alpha {ALPHA:g} spent Bonferroni over {len(LOOKS)} looks ({ALPHA_PER_LOOK:.4f} per look)")


#: how a result says its repeat was isolated (commands.client_spec); a result without it ran its repeats
#: on one server start (measures.repeat_meaning reads it the same way)
ISOLATION_KEY, OWN_START = "repeat_isolation", "server-start"
SAMPLES = ("the unit is the server start: runs that share one (repeat_isolation cache-reset, or not recorded) "
           "count as one sample, their geometric mean, since the start's own spread is not averaged away by "
           "running more on it")


def start_of(run_name: str, extra: dict) -> str:
    """The server start a run measured: its own (server-start) or the one its cache-reset repeats share."""
    return run_name if extra.get(ISOLATION_KEY) == OWN_START else "shared"


def per_start(values: list[float], starts: list[str] | None) -> list[float]:
    """One sample per server start: the geometric mean of the runs that share it (first-seen order)."""
    if starts is None:
        return list(values)
    groups: dict[str, list[float]] = {}
    for v, s in zip(values, starts):
        groups.setdefault(s, []).append(v)
    return [g[0] if len(g) == 1 else math.exp(sum(math.log(x) for x in g) / len(g)) if min(g) > 0
            else sum(g) / len(g) for g in groups.values()]


def next_look(n: int) -> int | None:
    """The runs per node the next look needs (None: the budget is spent)."""
    return next((k for k in LOOKS if k > n), None)


@dataclass(frozen=True)
class Decision:
    state: str
    more_runs: int | None = None   # server starts (runs of their own) to add per node for the next look
    within_pct: float | None = None  # the data show equivalence only within +-this (INCONCLUSIVE)

    @property
    def merges(self) -> bool:
        return self.state in MERGES


def decide_state(n: int, low: float | None, high: float | None, band: tuple[float, float],
                 point: float) -> Decision:
    """The state from the interval [low, high] of the ratio (None: single run, `point` alone)."""
    lo, hi = band
    if low is None or high is None:
        return Decision(UNVERIFIED) if lo <= point <= hi else \
            Decision(INCONCLUSIVE, (next_look(n) or n) - n, abs(point - 1) * 100)
    if lo <= low and high <= hi:
        return Decision(PASSED)
    if low > hi or high < lo:
        return Decision(FAILED)
    within = max(abs(low - 1), abs(high - 1), abs(1 / low - 1), abs(1 / high - 1)) * 100
    nxt = next_look(n)
    return Decision(INCONCLUSIVE, None if nxt is None else nxt - n, within)


def token_weighted_tpot(res) -> float | None:
    """sum(decode time) / sum(output_len - 1) in ms over requests with > 1 output token; a request's
    decode time is latency - TTFT, or the sum of its ITLs where the file has no `latencies` (vLLM
    0.26). None without per-request arrays (or with arrays of different lengths)."""
    ol, ttft = res.output_lens, res.ttfts
    if not ol:
        return None
    if res.latencies and ttft and len(res.latencies) == len(ttft) == len(ol):
        decode = [la - t if la is not None and t is not None else None for la, t in zip(res.latencies, ttft)]
    elif res.itls and len(res.itls) == len(ol):
        decode = [sum(x) if x else None for x in res.itls]
    else:
        return None
    num = den = 0.0
    for dt, o in zip(decode, ol):
        if o and o > 1 and dt is not None:
            num += dt
            den += o - 1
    return num / den * 1000.0 if den > 0 and num > 0 else None


def metric_value(res, metric: str) -> float:
    """The gate metric of one result (token-weighted TPOT falls back to vLLM's mean TPOT)."""
    if metric == "tpot_weighted_ms":
        v = token_weighted_tpot(res)
        return float(v if v is not None else res.mean_tpot_ms)
    return float(getattr(res, metric))
