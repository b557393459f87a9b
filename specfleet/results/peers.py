"""What `fab collect` / `fab report` do after the report for the features peer tools have (issue 26):
the plan snapshot `fab compare` reads, and the plan's assertions. One hook (report.report_plan calls
`after_report`), so the report's own modules stay as they are."""
from __future__ import annotations

from ..plan.assertions import NOT_CHECKED, AssertionResult, check
from .comparison import write_snapshot
from .goodput import SLO_HEADERS, slo_lines, slo_rows


def add_peer_sections(model, camp, tables, baseline: str, slo) -> None:
    """The report's "Goodput under the SLO" section (after the results) when the plan has an SLO;
    "Telemetry per run" with its timeline (inlined in report.html) when any run has a telemetry file
    (telemetry.py); and, when the gate failed, each node's telemetry beside the gate line."""
    from .document import Section
    from .plots import namespace_ids
    from .telemetry_report import (TELEMETRY_HEADERS, TIMELINE_IMAGE, node_differences, telemetry_rows, telemetry_table,
                            timeline_svg)
    tel = telemetry_table(camp)
    if not model.gate.passed:
        model.gate_telemetry = node_differences(tel, baseline, model.gate.rule.concurrency)
    if tel is not None:
        svg = timeline_svg(camp, camp.simulated)
        model.sections.append(Section(
            "Telemetry per run", TELEMETRY_HEADERS, telemetry_rows(tel),
            "Sampled on the worker during each vllm bench serve run (nvidia-smi --query-gpu for the server's "
            "GPUs, the server's /metrics; docs/telemetry.md). Mean power = the run's GPUs summed, averaged over "
            "the samples (warm-ups included); J / output token = mean power x the run's duration / its output "
            "tokens; throttle = the clock-event reasons seen (SW/HW power cap, thermal, power brake); "
            "'not recorded' = the worker could not read it (no nvidia-smi, a field its driver lacks). "
            "The timeline: requests in flight, generated tokens/s and GPU power over each run at the highest "
            "concurrency with telemetry (up to 8 runs)."
            + (" SIMULATED: the testbed's GPU stand-in models power and clocks." if camp.simulated else ""),
            anchor="telemetry-per-run", images=[TIMELINE_IMAGE] if svg else [],
            figures={TIMELINE_IMAGE: namespace_ids(svg, "timeline")} if svg else {}))
    if slo is None or "goodput_req_s" not in tables.runs:
        return
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
    _stale_timeline(out)
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


def _stale_timeline(out) -> None:
    """No timeline beside a report that does not show one (write_report writes it with the report)."""
    from .telemetry_report import TIMELINE_IMAGE
    if TIMELINE_IMAGE in out.paths:
        return
    svg_path = out.campaign_dir / TIMELINE_IMAGE
    if svg_path.is_file():
        svg_path.unlink()
