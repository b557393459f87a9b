"""`fab report`: the report from result files already on this machine; no host is touched."""
from __future__ import annotations

from pathlib import Path

from invoke import task
from invoke.exceptions import Exit

from specfleet.exits import EXIT_BAD_INPUT
from specfleet.tasks.bench import DEFAULT_PLAN, PLAN_HELP, plan_of


@task(help={"plan": PLAN_HELP,
            "results": "the folder that holds <campaign>/<host>/<config>_conc<N>.json (default results/)",
            "force": "merge even when the nodes are not equivalent; every output is stamped so",
            "gpu_bandwidth_gbps": "GPU memory bandwidth in GB/s of every node, for the bandwidth-bound table "
                                  "(default: each node's inventory gpu_memory_bandwidth_gbps as collect saved it, "
                                  "else looked up from its GPU's name; a figure far from that GPU's datasheet "
                                  "is shown beside the datasheet's, with a warning)"})
def report(c, plan=None, results="results", force=False, gpu_bandwidth_gbps=None):
    """Validate, gate, merge and write the report from results already fetched (touches no host)."""
    p = plan_of(plan)
    camp = Path(results) / p.campaign
    if not camp.is_dir():
        raise Exit(f"error: {camp}: no such folder (--results names the folder that holds "
                   f"{p.campaign}/<host>/<config>_conc<N>.json)", code=EXIT_BAD_INPUT)
    from specfleet.console import MaskedConsole

    from specfleet.report.build import report_plan  # heavy: pandas, matplotlib
    console = MaskedConsole(highlight=False)
    from specfleet.bastion_io import check_writable, storage_checked
    storage_checked(lambda: check_writable(camp))
    outcome = storage_checked(lambda: report_plan(
        p, plan or DEFAULT_PLAN, results, force=force,
        gpu_bandwidth_gbps=float(gpu_bandwidth_gbps) if gpu_bandwidth_gbps else None, console=console), camp)
    if outcome.merged:
        console.print(f"[bold green]report:[/] {outcome.paths.get('html')}")
    for msg in filter(None, (outcome.not_merged_message, outcome.incomplete_message)):
        console.print(f"[bold yellow]warning:[/] {msg}", markup=True)
    if outcome.exit_code:
        raise Exit(code=outcome.exit_code)
