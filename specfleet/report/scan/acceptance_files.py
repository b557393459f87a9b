"""Per-request acceptance in a collected folder: a speculative cell's `<config>_<cell>.acceptance.json`
(the worker's untimed pass, specfleet/worker/acceptance.py) read within bounds, each request checked by
the worker's own parser (acceptance.parse_metrics; a request it refuses is counted, never used), or why
a cell has none. The report's section: render/acceptance_report.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ... import untrusted_json
from ...plan.releases import PER_REQUEST_FLAG, release_of
from ...worker.acceptance import FILE_VERSION, parse_metrics
from .folder import Run

MAX_BYTES = 64 * 2**20


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


def speculative(runs: list[Run]) -> bool:
    return any(r.result.has_spec or "--speculative-config" in ((r.record and r.record.serve_argv) or [])
               for r in runs)
