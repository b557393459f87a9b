"""`fab collect`: fetch finished results from the workers, gate on node equivalence, merge, report."""
from __future__ import annotations

from pathlib import Path

from invoke import task
from invoke.exceptions import Exit

from specfleet.exits import EXIT_ASSERTION, EXIT_INCOMPLETE, EXIT_NOT_MERGED
from specfleet.tasks.bench import DEFAULT_PLAN, PLAN_HELP, campaign_run, plan_of
from specfleet.tasks.common import fleet_help, fleet_run


@task(help=fleet_help(changes=False, plan=PLAN_HELP, results="where results go (default results/)",
                      force="merge even when the nodes are not equivalent; every output is stamped so"))
def collect(c, plan=None, inventory=None, hosts=None, results="results", force=False, forks=32, serial=False,
            accept_new_host_keys=False, verbose=False):
    """Fetch finished results, check the nodes agree on the baseline, merge and write the report."""
    # here, not at the top: every `fab` command loads this module for its task list (tasks/bench.py)
    from specfleet.campaign import NodeInfo, PlanError, split
    from specfleet.bastion_io import BastionStorageError, check_writable, storage_checked
    from specfleet.collect.fetch import host_notes
    from specfleet.worker import layout
    p = plan_of(plan)
    dest = Path(results) / p.campaign
    storage_checked(lambda: check_writable(dest))  # a read-only or full results folder: before any host
    with fleet_run("collect", inventory=inventory, hosts=hosts, forks=forks, serial=serial,
                   accept_new_host_keys=accept_new_host_keys, verbose=True) as (fleet, inv, rep):
        backend, run = campaign_run(fleet, inv, rep, p, plan)
        try:
            fetched = backend.fetch(run, dest)
        except BastionStorageError as e:  # the bastion's disk, not a host: one line, its own exit code, no report
            raise Exit(f"error: {e}", code=e.code) from None
        from specfleet.report.scan.cells import PLACED, SPLIT, placed_missing, placed_queues
        queues, source = placed_queues(p, dest), PLACED
        if queues is None:  # a campaign placed without planned.json: the split over the inventory, said so
            source = SPLIT
            fleet.warn(f"{placed_missing(p, dest)}: the planned queues of hosts without a {layout.RUN_SPEC} "
                       "come from the split over the inventory")
            try:
                queues = split(p, [NodeInfo.from_vars(h.name, h.vars) for h in fleet.hosts]).queues
            except PlanError as e:
                queues = {}
                fleet.warn(f"cannot work out the planned queues of hosts without a {layout.RUN_SPEC}: {e}")
        from specfleet.report.build import report_plan  # heavy: pandas, matplotlib
        msgs = fetched.notes + [m for h in sorted(fetched.refused) for m in fetched.refused[h]]
        outcome = storage_checked(lambda: report_plan(
            # each host's gpu_memory_bandwidth_gbps went into its provenance.json (fetch.bandwidth_given):
            # the report reads it from there per host, as a later `fab report` does
            p, plan or DEFAULT_PLAN, results, force=force,
            split_queues=queues, queues_source=source, host_notes=host_notes(fleet.results), notes=msgs,
            console=rep.console,
            running=fetched.running), dest)
        from specfleet.report.scan.cells import running_note
        for m in msgs[len(fetched.notes):] + ([running_note(fetched.running, plan or DEFAULT_PLAN)]
                                               if fetched.running else []):
            fleet.warn(m)
        for m in fetched.notes:
            rep.console.print(m, markup=False)
        say(fleet, rep, outcome)


def say(fleet, rep, outcome) -> None:
    """The verdict: where the report is, or why nothing was merged; what it lacks (exit code)."""
    if outcome.merged:
        rep.console.print(f"[bold green]report:[/] {outcome.paths.get('html')}")
    else:
        fleet.verdict(EXIT_NOT_MERGED, outcome.not_merged_message)
    if outcome.incomplete_message:
        fleet.verdict(EXIT_INCOMPLETE, outcome.incomplete_message)
    for a in outcome.assertions:  # the plan's assertions (docs/compare.md): one failed or unchecked adds 32
        if not a.ok:
            fleet.verdict(EXIT_ASSERTION, a.line())
