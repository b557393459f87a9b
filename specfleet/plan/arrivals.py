"""Open-loop load: `benchmark.request_rates` as a bench dimension beside the concurrencies
(docs/campaign.md "Request rates: open-loop cells"). Every concurrency runs at every rate; a rate of
inf is the plain cell (`conc16`), with today's command line and file names.

Stdlib only: the results side parses the cell names (layout.CELL_PART holds the `-rate<R>` part).
"""
from __future__ import annotations

import math
from dataclasses import replace


def rate_part(rate: float) -> str:
    """`rate2`, `rate0.5`: the cell-name part of a finite rate."""
    return "rate" + (str(int(rate)) if float(rate).is_integer() else repr(float(rate)))


def rate_cells(cells: list, rates: list[float] | None) -> list:
    """Each cell at every rate, in plan order (a cell's rates together); inf keeps the cell as it is."""
    if not rates:
        return list(cells)
    out = []
    for c in cells:
        for r in rates:
            out.append(c if math.isinf(r) else replace(c, name=f"{c.name}-{rate_part(r)}", request_rate=float(r)))
    return out
