"""What `fab collect` / `fab report` do after the report for the features peer tools have (issue 26):
the plan snapshot `fab compare` reads, and the plan's assertions. One hook (report.report_plan calls
`after_report`), so the report's own modules stay as they are."""
from __future__ import annotations

from ..bench.assertions import NOT_CHECKED, AssertionResult, check
from .compare import write_snapshot


def after_report(out, plan, console=None, quiet: bool = False) -> None:
    """Writes plan.json beside the host folders; checks the plan's assertions into out.assertions
    (a failed or unchecked one adds EXIT_ASSERTION to the exit code) and prints them."""
    if out.campaign_dir.is_dir():
        write_snapshot(out.campaign_dir, plan)
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
