"""`fab bench`, `fab status`, `fab stop`: run a campaign's queues on the workers, detached from SSH, or as a
Slurm job: the inventory's backend (specfleet/backend/) does each, and the tasks never ask which.

The campaign and backend modules are imported where a task uses them: every `fab` command
(a no-op `fab provision` too) loads this module for its task list, not for the plan language.
"""
from __future__ import annotations

from pathlib import Path

from invoke import task
from invoke.exceptions import Exit

from specfleet.exits import EXIT_BAD_INPUT
from specfleet.tasks.common import command_line, fleet_help, fleet_run

DEFAULT_PLAN = "plans/qwen3-32b.yml"
PLAN_HELP = f"the campaign's plan file (default {DEFAULT_PLAN})"


def plan_of(path: str | None):
    from specfleet.campaign import load_plan
    return load_plan(path or DEFAULT_PLAN)  # a PlanError is a UserError: `guarded` words it (tasks/common.py)


def campaign_run(fleet, inv, rep, plan, plan_arg, *, check=False, verbose=False):
    """The inventory's backend (chosen once, from the inventory the fleet run loaded) and the run it is handed."""
    from specfleet.backend import Run, backend_for
    return backend_for(inv), Run(fleet, inv, rep.console, plan, plan_arg or DEFAULT_PLAN, command_line(),
                                 check=check, verbose=verbose)


@task(help=fleet_help(plan=PLAN_HELP, assign="pin configurations to nodes, e.g. eagle3=w2 (repeatable)",
                      wait="follow progress until every runner is done (default; --no-wait returns at once)",
                      poll="seconds between progress reads (default 2)",
                      exclude="leave these hosts out (comma list of host or group names), e.g. the node "
                              "a failed Slurm job named",
                      results="where fab collect puts results; the placed queues go to <results>/<campaign>/"
                              "planned.json (default results/)",
                      gate_runs="runs per node of the baseline's gate cell in all: those past benchmark.repeat "
                                "are added, each on its own server start, and nothing measured is redone "
                                "(an INCONCLUSIVE gate's next look; docs/report.md, \"Adding repeats\")",
                      durations_from="an earlier campaign's folder (results/<campaign>) whose finished items give the "
                                     "split its durations (default: those of this campaign's earlier plan on the "
                                     "workers, else the duration model)"),
      iterable=["assign"])
def bench(c, plan=None, inventory=None, hosts=None, exclude=None, check=False, diff=False, assign=None, wait=True,
          poll=2.0, forks=32, serial=False, accept_new_host_keys=False, verbose=False, results="results", gate_runs=0,
          durations_from=None):
    """Split the plan's configurations across the nodes and run each node's queue (resumable, reattaches)."""
    from specfleet.campaign import parse_pins, promptcount
    p = plan_of(plan)
    if gate_runs < 0:   # invoke reads an int (the default's type)
        raise Exit(f"error: --gate-runs: {gate_runs!r} is not a run count (0 or more)", code=EXIT_BAD_INPUT)
    promptcount.check(p)  # a missing bastion file, or one with too few prompts, stops here, before any host
    pins = parse_pins(assign or [])
    with fleet_run("bench", inventory=inventory, hosts=hosts, exclude=exclude, check=check, diff=diff, forks=forks,
                   serial=serial, accept_new_host_keys=accept_new_host_keys, verbose=verbose) as (fleet, inv, rep):
        backend, run = campaign_run(fleet, inv, rep, p, plan, check=check, verbose=verbose)
        placement = backend.place(run, pins=pins, gate_runs=gate_runs, results=Path(results),
                                  durations_from=durations_from)
        if placement is not None:  # None: no host to run on, or check mode
            backend.start(run, placement, wait=wait, poll=poll)


@task(help=fleet_help(changes=False, plan=PLAN_HELP))
def status(c, plan=None, inventory=None, hosts=None, forks=32, serial=False, accept_new_host_keys=False,
           verbose=False):
    """Show the progress of a running or finished campaign on every worker."""
    from specfleet.backend import campaign_table
    from specfleet.campaign.follow import progress_line
    p = plan_of(plan)
    with fleet_run("status", inventory=inventory, hosts=hosts, forks=forks, serial=serial,
                   accept_new_host_keys=accept_new_host_keys, verbose=verbose, recap=False) as (fleet, inv, rep):
        backend, run = campaign_run(fleet, inv, rep, p, plan)
        views = backend.view(run)
        for name, v in views.items():
            rep.console.print(progress_line(name, v), markup=False)
        campaign_table(rep.console, views)


@task(help=fleet_help(changes=False, plan=PLAN_HELP))
def stop(c, plan=None, inventory=None, hosts=None, forks=32, serial=False, accept_new_host_keys=False,
         verbose=False):
    """Stop the runners cleanly: each stops its vLLM server, frees the GPU and exits (resumable later)."""
    p = plan_of(plan)
    with fleet_run("stop", inventory=inventory, hosts=hosts, forks=forks, serial=serial,
                   accept_new_host_keys=accept_new_host_keys, verbose=verbose) as (fleet, inv, rep):
        backend, run = campaign_run(fleet, inv, rep, p, plan)
        backend.stop(run)
