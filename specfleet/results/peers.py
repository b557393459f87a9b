"""What `fab collect` / `fab report` do after the report for the features peer tools have (issue 26):
the plan snapshot `fab compare` reads, and the plan's assertions. One hook (report.report_plan calls
`after_report`), so the report's own modules stay as they are."""
from __future__ import annotations

from ..bench.assertions import NOT_CHECKED, AssertionResult, check
from .compare import write_snapshot
from .slo import SLO_HEADERS, add_goodput, slo_lines, slo_rows


def add_peer_columns(camp, runs, baseline: str, slo):
    """The merged rows with the goodput columns when the plan has an SLO (slo.py)."""
    return add_goodput(camp, runs, baseline, slo)


def add_peer_sections(model, tables, baseline: str, slo) -> None:
    """The report's "Goodput under the SLO" section (after the results), when the plan has an SLO."""
    if slo is None or "goodput_req_s" not in tables.runs:
        return
    from .document import Section
    lines = slo_lines(tables.runs, baseline, slo)
    sec = Section("Goodput under the SLO", SLO_HEADERS, slo_rows(tables.runs), " ".join(lines),
                  anchor="goodput-under-the-slo")
    at = next((i for i, s in enumerate(model.sections) if not s.title.startswith(("Results", "Latency"))),
              len(model.sections))
    model.sections.insert(at, sec)
    model.conclusions += lines[1:]


def after_report(out, plan, console=None, quiet: bool = False) -> None:
    """Writes plan.json beside the host folders; checks the plan's assertions into out.assertions
    (a failed or unchecked one adds EXIT_ASSERTION to the exit code) and prints them."""
    if out.campaign_dir.is_dir():
        write_snapshot(out.campaign_dir, plan)
    if out.merged and out.tables is not None and out.campaign is not None:  # llm-d Benchmark Report v0.2
        from .export import export_cells
        if files := export_cells(out.campaign_dir, out.campaign, out.tables, plan, out.model.gate_verdict,
                                 out.gate.rule.describe()):
            out.paths["llm-d"] = files[0].parent
    else:
        from .export import remove_stale
        remove_stale(out.campaign_dir)
    if not plan.assertions:
        return
    if out.merged and out.tables is not None:
        out.assertions = check(plan.assertions, out.tables.runs.to_dict("records"))
    else:
        out.assertions = [AssertionResult(a, NOT_CHECKED, "nothing merged") for a in plan.assertions]
    if not quiet:
        from rich.console import Console
        c = console or Console()
        for a in out.assertions:
            c.print(a.line(), style="green" if a.ok else "bold red", markup=False)
