"""The report's "Acceptance per request" section and its histogram: the rows of tables/acceptance_spread.py (each
speculative cell's per-request distribution beside the timed runs' counters, or why there is none)."""
from __future__ import annotations

import pandas as pd

from ...plan.releases import PER_REQUEST_FLAG
from ...worker.acceptance import MAX_CONCURRENCY
from ..scan.folder import CollectedFolder
from ..scan.provenance import simulated_signals
from ..tables.acceptance_spread import acceptance_rows
from .document import ReportModel, Section
from .plots import namespace_ids, per_request_acceptance_svg

IMAGE = "acceptance-per-request.svg"
HEADERS = ["node", "config", "cell", "runs' acceptance length", "runs' acceptance rate", "requests with metrics",
           "never drafted", "per-request acceptance length: median [p10, p90]",
           "per-request draft acceptance rate: median [p10, p90]", "pass pooled length"]


def add_acceptance_section(model: ReportModel, camp: CollectedFolder, runs_table: pd.DataFrame, baseline: str) -> None:
    """The section after the results, with its histogram; nothing when no configuration is speculative."""
    rows, series = acceptance_rows(camp, runs_table, baseline)
    if not rows:
        return
    simulated = bool(simulated_signals(camp))
    svg = per_request_acceptance_svg(series, series.pop("_k", 0), simulated)
    if not svg:  # nothing recorded: each row says why; the method is for a report that has it
        model.sections.append(Section(
            "Acceptance per request", HEADERS, rows, "No cell has per-request acceptance (the untimed pass of "
            f"benchmark.spec_decode_metrics: per_request, vLLM >= 0.29's {PER_REQUEST_FLAG}); each row says why. "
            "Runs' acceptance length and rate: the timed runs' spec_decode_* counters.", anchor="acceptance-per-request"))
        return
    model.sections.append(Section(
        "Acceptance per request", HEADERS, rows,
        "Runs' acceptance length and rate: the server-wide spec_decode_* counters of the timed runs (1 + accepted "
        "/ drafts, 100 x accepted / draft tokens, pooled over the cell's runs). The per-request columns come from "
        f"an untimed pass (benchmark.spec_decode_metrics: per_request; the server ran with {PER_REQUEST_FLAG} "
        "summary for the timed runs too, whose cost on TPOT was not checked): after a configuration's timed "
        f"runs, on the same server, the first repeat's prompts sent once more at the run's sampling, at most "
        f"{MAX_CONCURRENCY} at a time, each response's metrics.speculative_decoding kept. A cell's rows are its "
        "prompts' requests (cells with the same prompts show the same requests: one pass, not one per concurrency). Acceptance "
        "length per request = 1 + accepted draft tokens / verify steps (the counters' formula over one request); "
        "draft acceptance rate = accepted / draft tokens; median and p10/p90 by linear interpolation between "
        "order statistics; 'never drafted': requests without a verify step (an n-gram prompt without a match), "
        "left out of both. Pass pooled length = 1 + sum accepted / sum steps over the pass's requests: near the "
        "runs' counters unless the pass's requests drafted otherwise (temperature > 0 samples other tokens). "
        "No interval: a distribution across requests, not an estimate of a mean."
        + (" SIMULATED: the simulated engine draws each request's steps from its acceptance model; its untimed "
           "pass sends no category, so every request draws from the field report's prompt mix." if simulated
           else ""),
        anchor="acceptance-per-request", images=[IMAGE] if svg else [],
        figures={IMAGE: namespace_ids(svg, "acceptance")} if svg else {}))
