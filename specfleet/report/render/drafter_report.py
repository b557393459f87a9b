"""The drafter check's findings in the report (the worker's specfleet/worker/drafter.py wrote them into
every result of a drafter's configuration, `drafter_check`): a provenance section, and each warning
among the conclusions (a verifier that is not the served model: the field report's §1.3 rule)."""
from __future__ import annotations

import json

from ..scan.folder import CollectedFolder
from .document import ReportModel, Section

HEADERS = ["node", "config", "verdict", "warnings and notes"]


def findings(camp: CollectedFolder) -> dict[tuple[str, str], dict]:
    """(node, config) -> {"warnings": [...], "notes": [...]} of the results that carry a drafter check."""
    out: dict[tuple[str, str], dict] = {}
    for r in camp.runs:
        raw = r.result.extra.get("drafter_check")
        try:
            got = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            continue
        if not isinstance(got, dict):
            continue
        mine = out.setdefault((r.host, r.config), {"warnings": [], "notes": []})
        for kind in ("warnings", "notes"):
            for line in got.get(kind) or []:
                if isinstance(line, str) and line not in mine[kind]:
                    mine[kind].append(line)
    return out


def add_drafter_section(model: ReportModel, camp: CollectedFolder) -> None:
    """The section "Drafter checked against the model" after the provenance, and the warnings among the
    conclusions; nothing when no result carries a check (no drafter, or results of an older worker)."""
    found = findings(camp)
    if not found:
        return
    rows = [[node, cfg, "WARNING" if f["warnings"] else "consistent",
             " ".join(f["warnings"] + f["notes"]) or "hidden size, vocabulary, aux layers, verifier match the model"]
            for (node, cfg), f in sorted(found.items())]
    model.sections.append(Section(
        "Drafter checked against the model", HEADERS, rows,
        "Before each server started, the worker compared the drafter's config.json (speculators format: "
        "verifier, draft layer, target hidden size, vocabularies, aux layers, trained depth) with the served "
        "model's; a mismatch in type, hidden size, vocabulary or aux layers refuses the item, so what is here "
        "ran. A verifier that is not the served model (name, architectures, quantization) is a warning.",
        anchor="drafter-checked-against-the-model"))
    model.conclusions += [f"Drafter: {cfg} on {node}: {w}" for (node, cfg), f in sorted(found.items())
                          for w in f["warnings"]]
