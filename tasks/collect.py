"""`fab collect`: fetch finished results from the workers, gate on node equivalence, merge, report."""
from __future__ import annotations

from pathlib import Path

from invoke import task
from invoke.exceptions import Exit

from specfleet.exits import EXIT_ASSERTION, EXIT_INCOMPLETE, EXIT_NOT_MERGED
from specfleet.tasks.bench import DEFAULT_PLAN, PLAN_HELP, plan_of, work_dir
from specfleet.tasks.common import fleet_help, fleet_run


@task(help=fleet_help(changes=False, plan=PLAN_HELP, results="where results go (default results/)",
                      force="merge even when the nodes are not equivalent; every output is stamped so"))
def collect(c, plan=None, inventory=None, hosts=None, results="results", force=False, forks=32, serial=False,
            accept_new_host_keys=False, verbose=False):
    """Fetch finished results, check the nodes agree on the baseline, merge and write the report."""
    # here, not at the top: every `fab` command loads this module for its task list (tasks/bench.py)
    from specfleet.campaign import NodeInfo, PlanError, split
    from specfleet.bastion_io import BastionStorageError, check_writable, storage_checked
    from specfleet.collect.fetch import fetch, host_notes
    from specfleet.worker import layout
    p = plan_of(plan)
    dest = Path(results) / p.campaign
    storage_checked(lambda: check_writable(dest))  # a read-only or full results folder: before any host
    with fleet_run("collect", inventory=inventory, hosts=hosts, forks=forks, serial=serial,
                   accept_new_host_keys=accept_new_host_keys, verbose=True) as (fleet, inv, rep):
        refused: dict[str, list[str]] = {}
        faults: list[BastionStorageError] = []
        running: dict[str, str] = {}

        def fetch_one(hc):
            try:
                return fetch(hc, p, work_dir(hc.host), dest, refused, running)
            except BastionStorageError as e:
                faults.append(e)
                raise
        slurm_notes = []
        if inv.slurm:  # results on the shared path, no SSH (specfleet/slurm/)
            from specfleet.slurm.dispatch import collect as slurm_collect
            try:
                slurm_notes = slurm_collect(fleet, inv, p, dest, refused)
            except BastionStorageError as e:
                faults.append(e)
        else:
            fleet.each("fetch results", fetch_one)
        if faults:  # the bastion's disk, not a host: one line, its own exit code, no report attempted
            raise Exit(f"error: {faults[0]}", code=faults[0].code)
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
        msgs = slurm_notes + [m for h in sorted(refused) for m in refused[h]]
        outcome = storage_checked(lambda: report_plan(
            # each host's gpu_memory_bandwidth_gbps went into its provenance.json (fetch.bandwidth_given):
            # the report reads it from there per host, as a later `fab report` does
            p, plan or DEFAULT_PLAN, results, force=force,
            split_queues=queues, queues_source=source, host_notes=host_notes(fleet.results), notes=msgs,
            console=rep.console,
            running=running), dest)
        from specfleet.report.scan.cells import running_note
        for m in msgs[len(slurm_notes):] + ([running_note(running, plan or DEFAULT_PLAN)] if running else []):
            fleet.warn(m)
        for m in slurm_notes:
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
