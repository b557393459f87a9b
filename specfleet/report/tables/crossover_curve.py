"""Where a configuration stops paying: its speedup over the concurrencies measured, in words
(docs/report.md, "The crossover"), per configuration and node with >= CURVE_MIN_POINTS speedups.
Each edge is judged by measures.speedup_noise, and the points of one curve together: a point is faster
or slower only where its two-sided p (measures.speedup_p) survives Holm's correction over the curve's
points at CURVE_ALPHA (seven points at 95 % each would call some no-difference point faster or slower
up to 30 % of the time); measured points only: nothing between two measured concurrencies is inferred.
"""
from __future__ import annotations

from itertools import groupby

import pandas as pd

from .compare_policy import holm
from .measures import NoiseBand, evidence

CURVE_MIN_POINTS = 3
CURVE_ALPHA = 0.05   # family-wise error rate over one curve's point verdicts (Holm)
FASTER, SLOWER, NO_DIFF = "faster", "slower", "no measurable difference"


def curves(runs: pd.DataFrame, baseline: str) -> list[tuple[str, str, pd.DataFrame]]:
    """(config, node, its rows by concurrency) with >= CURVE_MIN_POINTS speedups."""
    df = runs[(runs.config != baseline) & runs.speedup.notna() & (runs.speedup_verdict != "")]
    return [(cfg, node, g.sort_values("concurrency")) for (cfg, node), g in df.groupby(["config", "node"], sort=False)
            if len(g) >= CURVE_MIN_POINTS]


def _ev(r: pd.Series, noise: NoiseBand) -> str:
    return f"c={int(r.concurrency)}: {evidence(r, noise)}"


def _span(rows: list[pd.Series]) -> str:
    a, b = int(rows[0].concurrency), int(rows[-1].concurrency)
    return f"{a}" if a == b else f"{a}-{b}"


def search_status(nodes: dict) -> dict[tuple[str, str], str]:
    """(node, config) -> why the runner's search stopped (its state.json, fetched by collect)."""
    out = {}
    for host, n in nodes.items():
        cfgs = ((n.state or {}).get("crossover") or {}).get("configs") or {}
        for cfg, d in cfgs.items() if isinstance(cfgs, dict) else ():
            if isinstance(d, dict) and isinstance(d.get("why"), str):
                out[(host, cfg)] = d["why"]
    return out


def holm_verdicts(g: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The curve's rows with speedup_verdict corrected by Holm over its points with repeats (a single-run
    point keeps the plain threshold: it has no p), and one phrase per point the correction undid."""
    g = g.copy()
    tested = [i for i, p in zip(g.index, g.get("speedup_p", pd.Series(index=g.index, dtype=float))) if p == p]
    undone = []
    for i, adj in zip(tested, holm([float(g.at[i, "speedup_p"]) for i in tested])):
        if g.at[i, "speedup_verdict"] in (FASTER, SLOWER) and adj > CURVE_ALPHA:
            undone.append(f"c={int(g.at[i, 'concurrency'])} {g.at[i, 'speedup_verdict']} alone "
                          f"(p={g.at[i, 'speedup_p']:.2g}) but not after Holm over the {len(tested)} points "
                          f"(adjusted p={adj:.2g})")
            g.at[i, "speedup_verdict"] = NO_DIFF
    return g, undone


def statement(cfg: str, node: str, g: pd.DataFrame, noise: NoiseBand, why: str | None = None) -> str:
    g, undone = holm_verdicts(g)
    # runs of equal verdicts, by concurrency: (verdict, its rows)
    segs = [(k, list(rows)) for k, rows in groupby((r for _, r in g.iterrows()), key=lambda r: r.speedup_verdict)]
    kinds = [k for k, _ in segs]
    lo, hi = int(g.concurrency.iloc[0]), int(g.concurrency.iloc[-1])
    head = f"Crossover of **{cfg}** on {node} (concurrency {lo}-{hi}): "
    if kinds == [FASTER]:
        worst = g.loc[g.speedup.idxmin()]
        what = f"pays at every concurrency measured (lowest: {_ev(worst, noise)})"
    elif kinds == [SLOWER]:
        best = g.loc[g.speedup.idxmax()]
        what = f"loses at every concurrency measured (highest: {_ev(best, noise)})"
    elif kinds == [NO_DIFF]:
        what = "no measurable difference at any concurrency measured"
    elif kinds in ([FASTER, NO_DIFF, SLOWER], [FASTER, SLOWER], [FASTER, NO_DIFF], [NO_DIFF, SLOWER]):
        parts = []
        if kinds[0] == FASTER:
            a = segs[0][1][-1]
            parts.append(f"pays up to concurrency {int(a.concurrency)} ({_ev(a, noise)})")
        if NO_DIFF in kinds:
            mid = segs[kinds.index(NO_DIFF)][1]
            start = int(segs[0][1][-1].concurrency) if kinds[0] == FASTER else lo
            end = int(segs[-1][1][0].concurrency) if kinds[-1] == SLOWER else hi
            parts.append(f"no measurable difference between {start} and {end} (measured at "
                         f"{', '.join(str(int(r.concurrency)) for r in mid)})")
        elif kinds == [FASTER, SLOWER]:
            parts.append("nothing measured between the two")
        if kinds[-1] == SLOWER:
            b = segs[-1][1][0]
            parts.append(f"loses from concurrency {int(b.concurrency)} ({_ev(b, noise)})")
        what = ", ".join(parts)
    else:
        what = ("not monotone in concurrency: " +
                "; ".join(f"{k} at {_span(rows)}" for k, rows in segs) + " (more repeats narrow the intervals)")
    cross = [(a, b) for (_, a), (_, b) in zip(g.iterrows(), list(g.iterrows())[1:])
             if (a.speedup > 1.0) != (b.speedup > 1.0)]
    tail = "".join(f"; the speedup estimate crosses 1.00x between concurrency {int(a.concurrency)} "
                   f"({a.speedup:.3f}x) and {int(b.concurrency)} ({b.speedup:.3f}x)" for a, b in cross)
    pts = ", ".join(str(int(c)) for c in g.concurrency)
    search = f" The node's crossover search: {why}." if why else ""
    holm_words = (f" Point verdicts corrected by Holm over the curve's points (family-wise {CURVE_ALPHA:g})"
                  + (f": {'; '.join(undone)}." if undone else "."))
    return (f"{head}{what}{tail}. Measured at {pts}; nothing between measured points is inferred."
            f"{holm_words}{search}")


def crossover_lines(runs: pd.DataFrame, baseline: str, noise: NoiseBand,
                    search: dict[tuple[str, str], str] | None = None) -> list[str]:
    return [statement(cfg, node, g, noise, (search or {}).get((node, cfg))) for cfg, node, g in curves(runs, baseline)]
