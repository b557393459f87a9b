"""Per-request acceptance as the report shows it: per speculative cell, the timed runs' counters beside
the untimed pass's requests (median, p10, p90 of acceptance length and draft acceptance rate), or why
there are none (scan/acceptance_files.py reads the files)."""
from __future__ import annotations

import math
import statistics

import pandas as pd

from ...worker import layout
from ..scan.acceptance_files import CellAcceptance, not_asked, read, speculative
from ..scan.folder import CollectedFolder


def _fmt(v: float, nd: int, suffix: str = "") -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{nd}f}{suffix}"


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, p10, p90): linear interpolation between order statistics (numpy's default, statistics'
    'inclusive'); one value is all three."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=10, method="inclusive")
    return statistics.median(values), q[0], q[8]


def _spread_cell(vals: list[float], nd: int, suffix: str = "", scale: float = 1.0) -> str:
    if not vals:
        return "–"
    med, lo, hi = (v * scale for v in spread(vals))
    return f"{_fmt(med, nd, suffix)} [{_fmt(lo, nd)}, {_fmt(hi, nd)}]"


def acceptance_rows(camp: CollectedFolder, runs_table: pd.DataFrame, baseline: str) -> tuple[list[list[str]], dict]:
    """The section's rows (node, config, cell order) and the histogram's series: config -> node -> the
    lengths of the cell with the most requests."""
    counters = {(r.node, r.config, r.cell): r for r in runs_table.itertuples()} if len(runs_table) else {}
    rows, series, best = [], {}, {}
    for (cell, cfg, host), runs in sorted(camp.groups().items(), key=lambda kv: (kv[0][2], kv[0][1], kv[1][0].conc)):
        if cfg == baseline or not speculative(runs):
            continue
        path = runs[0].path.with_name(layout.acceptance_file(cfg, cell))
        got = read(path) if path.is_file() else CellAcceptance(why="not recorded: " + not_asked(runs))
        row = counters.get((host, cfg, cell))
        head = [host, cfg, cell, _fmt(getattr(row, "acceptance_length", math.nan), 3),
                _fmt(getattr(row, "acceptance_rate_pct", math.nan), 1, " %")]
        if not got.lengths:
            rows.append(head + [got.why or "not recorded: no request drafted", "", "", "", ""])
            continue
        sent = f"{len(got.lengths) + got.never_drafted} of {got.sent}" + (f" ({got.failed} failed)" if got.failed else "")
        rows.append(head + [sent, str(got.never_drafted), _spread_cell(got.lengths, 3),
                            _spread_cell(got.rates, 1, " %", 100.0), _fmt(1.0 + got.accepted / got.steps, 3)])
        if got.why:  # a pass cut short: what it recorded, said as such
            rows[-1][5] += f"; {got.why}"
        if len(got.lengths) > len(best.get((cfg, host), [])):
            best[(cfg, host)] = got.lengths
            series.setdefault(cfg, {})[host] = got.lengths
        series["_k"] = max(series.get("_k", 0), got.k)
    return rows, series
