"""Per Spec-Bench category results from per-category bench cells (`--spec-bench-category CAT`).

Why per-category runs and not per-request mapping: vLLM's spec-decode numbers are server-wide
Prometheus counters scraped before the first and after the last request of a run (vLLM's
`benchmarks/serve.py`: `vllm:spec_decode_*_total` differenced over the run),
so a run over all categories gives one acceptance figure for the mix; only a run that sends one
category's prompts gives that category's exact counters. The loader filters by category before
its shuffle (SpecBench.load_data, seed always 0), so the cell measures the first num_prompts of
that category in a fixed order, the same on every node. Each category cell is paired with the same
node's baseline in the same cell, as every other cell is (merge.runs_table).
"""
from __future__ import annotations

import pandas as pd

COLS = ["concurrency", "output_len", "category", "config", "node", "cell", "completed",
        "acceptance_rate_pct", "acceptance_length", "drafts_per_step", "output_tok_s", "speedup",
        "speedup_ci_low", "speedup_ci_high", "speedup_verdict", "acceptance_flag"]


def cells_by_category(runs: pd.DataFrame, baseline: str) -> pd.DataFrame | None:
    """One row per (category cell, configuration, node) of the runs table; None without category cells."""
    if "category" not in runs or not runs.category.notna().any():
        return None
    df = runs[runs.category.notna()].assign(**{c: float("nan") for c in COLS if c not in runs})
    df["_base"] = df.config == baseline  # the baseline's row first in each category: the reference
    df = df.sort_values(["concurrency", "output_len", "category", "_base", "config", "node"],
                        ascending=[True, True, True, False, True, True], na_position="first")
    return df[COLS].reset_index(drop=True)


def heatmap_grid(cat: pd.DataFrame, baseline: str, value: str = "speedup") -> list[tuple[str, pd.DataFrame]]:
    """(title, configuration x category table of `value`) per (concurrency, output_len) of the cells.

    A configuration measured on several nodes (only the baseline, normally) is averaged over them.
    """
    out = []
    df = cat[cat.config != baseline]
    for (conc, olen), sub in df.groupby(["concurrency", df.output_len.fillna(-1)], sort=True):
        grid = sub.pivot_table(index="config", columns="category", values=value, aggfunc="mean")
        if grid.empty:
            continue
        where = f"concurrency {int(conc)}" + (f", output_len {int(olen)}" if olen != -1 else "")
        out.append((where, grid))
    return out
