"""Open-loop load: `benchmark.request_rates` as a bench dimension beside the concurrencies (docs/campaign.md
"Request rates").

    benchmark:
      concurrencies: [16]
      request_rates: [2, 4, inf]   # requests per second; inf = closed loop (every request at once)
      burstiness: 1.0              # 1 = Poisson arrivals; < 1 burstier, > 1 more even (gamma, vLLM's rule)
      seed: 0                      # the arrival times' seed (vllm bench serve --seed)

Every concurrency runs at every rate: the cell `conc16-rate2` is vllm bench serve with
`--request-rate 2 --burstiness 1 --seed 0 --max-concurrency 16` (the concurrency caps the requests in
flight). A rate of inf is the plain cell (`conc16`), with today's command line and file names. The
result files record `request_rate` and `burstiness` themselves (vLLM's header) and the seed in their
metadata (`arrival_seed`).

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
