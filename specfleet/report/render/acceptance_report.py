"""The report's "Acceptance per request" section: each speculative cell's per-request acceptance (the
worker's untimed pass, specfleet/worker/acceptance.py, `<config>_<cell>.acceptance.json`) as a
distribution (median, p10, p90 of acceptance length and draft acceptance rate, a histogram), beside the
timed runs' server-wide counters (spec_decode_* of each result); where a cell has none, why.

The file comes from a worker: parsed within bounds, each request checked by the worker's own parser
(acceptance.parse_metrics); a request it refuses is counted, never used.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import pandas as pd

from ... import untrusted_json
from ...plan.releases import PER_REQUEST_FLAG, release_of
from ...worker import layout
from ...worker.acceptance import FILE_VERSION, MAX_CONCURRENCY, parse_metrics
from ..scan.folder import Campaign, Run
from .document import ReportModel, Section, fmt
from .plots import namespace_ids, per_request_acceptance_svg

IMAGE = "acceptance-per-request.svg"
MAX_BYTES = 64 * 2**20
HEADERS = ["node", "config", "cell", "runs' acceptance length", "runs' acceptance rate", "requests with metrics",
           "never drafted", "per-request acceptance length: median [p10, p90]",
           "per-request draft acceptance rate: median [p10, p90]", "pass pooled length"]


@dataclass
class CellAcceptance:
    """One cell's requests as the pass recorded them, or why there are none (`why`)."""

    sent: int = 0
    lengths: list[float] = field(default_factory=list)   # 1 + accepted / steps, requests with steps only
    rates: list[float] = field(default_factory=list)     # accepted / draft tokens, requests with drafts only
    never_drafted: int = 0
    no_metrics: int = 0
    failed: int = 0      # a request the server refused, or whose metrics did not parse
    steps: int = 0
    accepted: int = 0
    k: int = 0
    concurrency: int | None = None
    why: str | None = None


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, p10, p90): linear interpolation between order statistics (numpy's default, statistics'
    'inclusive'); one value is all three."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=10, method="inclusive")
    return statistics.median(values), q[0], q[8]


def read(path) -> CellAcceptance:
    """A cell's acceptance file, within bounds; `why` says what makes it unusable."""
    out = CellAcceptance()
    try:
        doc = untrusted_json.loads(path.read_text(encoding="utf-8"), MAX_BYTES)
    except (OSError, ValueError) as e:
        out.why = f"{path.name} is not readable JSON ({e})"
        return out
    if not isinstance(doc, dict) or doc.get("specfleet_acceptance") != FILE_VERSION or \
            not isinstance(doc.get("requests"), list):
        out.why = f"{path.name} is not an acceptance file this report reads (version {FILE_VERSION})"
        return out
    if isinstance(doc.get("not_recorded"), str):
        out.why = f"the untimed pass did not complete: {doc['not_recorded'][:300]}"
    c = (doc.get("pass") or {}).get("concurrency") if isinstance(doc.get("pass"), dict) else None
    out.concurrency = c if isinstance(c, int) and not isinstance(c, bool) else None
    for r in doc["requests"]:
        out.sent += 1
        if not isinstance(r, dict) or "error" in r:
            out.failed += 1
            continue
        if r.get("no_metrics"):
            out.no_metrics += 1
            continue
        try:
            m = parse_metrics({"metrics": {"speculative_decoding": r}})
        except ValueError:
            m = None
        if m is None or m["num_accepted_draft_tokens"] > m["num_draft_tokens"]:
            out.failed += 1
            continue
        steps, acc, drafted = m["num_spec_steps"], m["num_accepted_draft_tokens"], m["num_draft_tokens"]
        out.k = max(out.k, m["num_spec_tokens"])
        if not steps:
            out.never_drafted += 1
            continue
        out.steps, out.accepted = out.steps + steps, out.accepted + acc
        out.lengths.append(1.0 + acc / steps)
        if drafted:
            out.rates.append(acc / drafted)
    if out.sent and not out.lengths and not out.why and out.no_metrics:
        out.why = (f"none of the {out.sent} responses carried metrics.speculative_decoding (does the engine "
                   f"have {PER_REQUEST_FLAG}?)")
    return out


def not_asked(runs: list[Run]) -> str:
    """Why a speculative cell has no acceptance file: its server was given the flag, its release lacks
    it, or the plan did not ask."""
    argv = next((r.record.serve_argv for r in runs if r.record and r.record.serve_argv), None) or []
    if any(w == PER_REQUEST_FLAG or w.startswith(PER_REQUEST_FLAG + "=") for w in argv):
        return "asked, but no acceptance file was collected (the untimed pass did not run to its end: runner notes)"
    version = str(next((r.result.extra.get("vllm_version") for r in runs if r.result.extra.get("vllm_version")), ""))
    rel = None if any(r.result.simulated for r in runs) else release_of(version)
    if rel is not None and PER_REQUEST_FLAG not in rel.serve_flags:
        return f"vLLM {rel.version} has no {PER_REQUEST_FLAG} (from 0.29)"
    return "not asked (the plan's benchmark.spec_decode_metrics is counters)"


def _speculative(runs: list[Run]) -> bool:
    return any(r.result.has_spec or "--speculative-config" in ((r.record and r.record.serve_argv) or [])
               for r in runs)


def _spread_cell(vals: list[float], nd: int, suffix: str = "", scale: float = 1.0) -> str:
    if not vals:
        return "–"
    med, lo, hi = (v * scale for v in spread(vals))
    return f"{fmt(med, nd, suffix)} [{fmt(lo, nd)}, {fmt(hi, nd)}]"


def acceptance_rows(camp: Campaign, runs_table: pd.DataFrame, baseline: str) -> tuple[list[list[str]], dict]:
    """The section's rows (node, config, cell order) and the histogram's series: config -> node -> the
    lengths of the cell with the most requests."""
    counters = {(r.node, r.config, r.cell): r for r in runs_table.itertuples()} if len(runs_table) else {}
    rows, series, best = [], {}, {}
    for (cell, cfg, host), runs in sorted(camp.groups().items(), key=lambda kv: (kv[0][2], kv[0][1], kv[1][0].conc)):
        if cfg == baseline or not _speculative(runs):
            continue
        path = runs[0].path.with_name(layout.acceptance_file(cfg, cell))
        got = read(path) if path.is_file() else CellAcceptance(why="not recorded: " + not_asked(runs))
        row = counters.get((host, cfg, cell))
        head = [host, cfg, cell, fmt(getattr(row, "acceptance_length", math.nan), 3),
                fmt(getattr(row, "acceptance_rate_pct", math.nan), 1, " %")]
        if not got.lengths:
            rows.append(head + [got.why or "not recorded: no request drafted", "", "", "", ""])
            continue
        sent = f"{len(got.lengths) + got.never_drafted} of {got.sent}" + (f" ({got.failed} failed)" if got.failed else "")
        rows.append(head + [sent, str(got.never_drafted), _spread_cell(got.lengths, 3),
                            _spread_cell(got.rates, 1, " %", 100.0), fmt(1.0 + got.accepted / got.steps, 3)])
        if got.why:  # a pass cut short: what it recorded, said as such
            rows[-1][5] += f"; {got.why}"
        if len(got.lengths) > len(best.get((cfg, host), [])):
            best[(cfg, host)] = got.lengths
            series.setdefault(cfg, {})[host] = got.lengths
        series["_k"] = max(series.get("_k", 0), got.k)
    return rows, series


def add_acceptance_section(model: ReportModel, camp: Campaign, runs_table: pd.DataFrame, baseline: str) -> None:
    """The section after the results, with its histogram; nothing when no configuration is speculative."""
    rows, series = acceptance_rows(camp, runs_table, baseline)
    if not rows:
        return
    k = series.pop("_k", 0)
    svg = per_request_acceptance_svg(series, k, camp.simulated)
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
           "pass sends no category, so every request draws from the field report's prompt mix." if camp.simulated
           else ""),
        anchor="acceptance-per-request", images=[IMAGE] if svg else [],
        figures={IMAGE: namespace_ids(svg, "acceptance")} if svg else {}))
