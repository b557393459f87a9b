"""`fab bench`, `fab status`, `fab stop`: run a campaign's queues on the workers, detached from SSH.

The campaign, worker and Slurm modules are imported where a task uses them: every `fab` command
(a no-op `fab provision` too) loads this module for its task list, not for the plan language.
"""
from __future__ import annotations

from pathlib import Path

from invoke import task
from invoke.exceptions import Exit
from rich.table import Table

from specfleet.errors import UserError, one_line
from specfleet.roles import configs, vars_model
from specfleet.exits import EXIT_BAD_INPUT
from specfleet.shell import q
from specfleet.step import HostStatus, Status
from specfleet.steps.command import Assert
from specfleet.tasks.common import command_line, fleet_help, fleet_run, load

DEFAULT_PLAN = "plans/qwen3-32b.yml"
PLAN_HELP = f"the campaign's plan file (default {DEFAULT_PLAN})"


def plan_of(path: str | None):
    from specfleet.campaign import load_plan
    return load_plan(path or DEFAULT_PLAN)  # a PlanError is a UserError: `guarded` words it (tasks/common.py)


def work_dir(host) -> str:
    return host.var("bench_work_dir", f"{configs.home(host)}/campaigns")


def paths_for(host, plan):
    from specfleet.campaign import Paths
    return Paths(venv=host.require("venv_path"), work_dir=work_dir(host), dataset=worker_dataset(host, plan))


def worker_dataset(host, plan) -> str:
    """The dataset's path on the worker: as the plan spells it, or where configs places the bastion file."""
    return plan.benchmark.on_worker or configs.dataset_path(host, plan.dataset_file())


def _dataset_on_worker(host, plan) -> Assert:
    path = plan.benchmark.on_worker
    return Assert("dataset on the worker", f"test -f {q(path)} && test -r {q(path)}",
                  f"{plan.file}: field 'benchmark.dataset_path': {path} is not a readable file on {host.name} "
                  "(put it there, or name a bastion file, which fab bench places on every worker)")


def without(inventory, hosts: str | None, exclude: str) -> str:
    """`--hosts` (default: the workers) less the hosts `--exclude` names, as a --hosts value."""
    from specfleet.slurm.hooks import chosen_hosts
    inv = load(inventory)
    keep = [h.name for h in chosen_hosts(inv, hosts)]
    try:  # the names --hosts takes; the one line names the flag that gave the unknown one
        drop = {h.name for h in inv.select(exclude)}
    except UserError as e:
        raise Exit(f"error: {one_line(e).replace('--hosts names', '--exclude names', 1)}",
                   code=EXIT_BAD_INPUT) from None
    keep = [n for n in keep if n not in drop]
    if not keep:
        raise Exit(f"error: {inv.path}: --exclude {exclude} leaves no host of {hosts or 'the workers'} to run on",
                   code=EXIT_BAD_INPUT)
    return ",".join(keep)


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
    from specfleet.campaign import build_run_spec, commands_for, format_split, parse_pins, promptcount
    from specfleet.campaign import remote, split
    from specfleet.campaign.schedule import measured
    from specfleet.campaign.spec import RunnerBusy, resumed
    from specfleet.slurm.hooks import on_slurm
    p = plan_of(plan)
    if gate_runs < 0:   # invoke reads an int (the default's type)
        raise Exit(f"error: --gate-runs: {gate_runs!r} is not a run count (0 or more)", code=EXIT_BAD_INPUT)
    promptcount.check(p)  # a missing bastion file, or one with too few prompts, stops here, before any host
    if exclude:
        hosts = without(inventory, hosts, exclude)
    if on_slurm("bench", inventory, hosts, p, vars_model(), assign=assign, wait=wait, poll=poll, check=check,
                results=Path(results)) is not None:
        return  # the inventory's scheduler is Slurm: submitted as a job (specfleet/slurm/)
    with fleet_run("bench", inventory=inventory, hosts=hosts, check=check, diff=diff, forks=forks, serial=serial,
                   accept_new_host_keys=accept_new_host_keys, verbose=verbose) as (fleet, inv, rep):
        # one probe batch per worker: its GPUs and topology (the split's slots) and its campaign's state
        # (resume, reattach), with the plan's dataset check; a host that fails here leaves the split
        reads: dict[str, remote.ReadWorker] = {}

        def probe(h):  # in the play: a var this host lacks fails it alone
            reads[h.name] = remote.ReadWorker(h, work_dir(h), p.campaign)
            return [reads[h.name]] + ([_dataset_on_worker(h, p)] if p.benchmark.on_worker else [])
        fleet.play(probe)
        split_hosts = [h for h in fleet.active if h.name in reads and reads[h.name].node]
        nodes = [reads[h.name].node for h in split_hosts]
        if not nodes:
            return
        queues = split(p, nodes, pins=parse_pins(assign or []),
                       **measured.for_split(p, {h.name: reads[h.name].view for h in split_hosts}, durations_from))
        rep.console.print(format_split(queues, nodes), markup=False)
        paths = {}
        for host in split_hosts:
            try:
                paths[host.name] = paths_for(host, p)
            except UserError as e:  # e.g. a var this host lacks: it fails alone
                fleet.record_local_for(host.name, "inventory vars", Status.FAILED, str(e))
                continue
            rep.console.print(f"[bold]{host.name}[/]: " + " -> ".join(queues.queues[host.name]))
            if verbose or check:  # the full command lines (hundreds of characters each) on request only
                for item in queues.queues[host.name]:
                    for line in commands_for(p, host.name, item, paths[host.name]):
                        rep.console.print(f"    {line}", markup=False, soft_wrap=True)
            if p.baseline in queues.queues[host.name] and gate_runs > p.benchmark.repeat:
                rep.console.print(f"    gate runs: {p.baseline} at concurrency {p.equivalence.concurrency}, runs "
                                  f"{p.benchmark.repeat + 1}-{gate_runs}, each on its own server start",
                                  markup=False)
        if check:
            return
        if not verbose:
            rep.console.print("[dim](--verbose or --check prints each server's and bench client's full command line)[/]")
        from specfleet.report.scan.cells import write_placed  # here: fab's start-up stays lean
        write_placed(p, queues.queues, Path(results) / p.campaign, _left_out(fleet, split_hosts))
        views = {h.name: reads[h.name].view for h in split_hosts}
        specs = {}
        for host in [h for h in split_hosts if h in fleet.active and h.name in paths]:
            v = views.get(host.name)
            node = reads[host.name].node
            spec = build_run_spec(p, host.name, queues.queues[host.name], paths[host.name],
                                  env_file=host.var("env_file"), gpu_index=host.var("gpu_index"),
                                  gpus=list(node.gpus), gpu_groups=node.gpu_groups, gate_runs=gate_runs)
            try:
                specs[host.name] = resumed(spec, v and v.spec, v.runner_pid if v and v.alive else None)
            except RunnerBusy as e:
                fleet.record_local_for(host.name, "start runner", Status.FAILED, str(e))
        fleet.play(lambda h: _placement(h, p, specs[h.name]),
                   hosts=[h for h in fleet.active if h.name in specs])
        fleet.interrupt_hints = [  # on Ctrl-C from here on
            "the runners already started go on without fab (they are detached from SSH);",
            f"reattach: `{command_line()}` again (or resume, if one stopped); progress: "
            f"`fab status --plan {plan or DEFAULT_PLAN}`; stop them: `fab stop --plan {plan or DEFAULT_PLAN}`"]

        runners: dict[str, int] = {}  # host -> the runner this run follows

        def start(hc):
            v = views.get(hc.host.name)
            status, message, pid = remote.start_or_reattach(
                hc, work_dir(hc.host), p.campaign, hc.host.require("runner_python"),
                configs.runner_path(hc.host), resuming=bool(v and v.state))
            if pid is not None:
                runners[hc.host.name] = pid
            return HostStatus(status, message)
        fleet.each("start runner", start, hosts=[h for h in fleet.active if h.name in specs])
        if wait:
            estimates = {h: {c: queues.durations[c][h] for c in queues.queues[h] if h in queues.durations.get(c, {})}
                         for h in specs}
            _follow(fleet, p, rep, poll, runners, estimates, predicted=queues)


def _left_out(fleet, split_hosts) -> dict[str, str]:
    """Each host this bench was asked for but placed nothing on, with why (the report names it)."""
    placed = {h.name for h in split_hosts}
    out = {}
    for h in fleet.hosts:
        if h.name in placed:
            continue
        r = next((r for r in fleet.results if r.host == h.name and r.status in (Status.FAILED, Status.UNREACHABLE)),
                 None)
        first = r.message.strip().splitlines()[0][:300] if r and r.message.strip() else "no GPUs read"
        out[h.name] = f"{'unreachable' if r and r.status is Status.UNREACHABLE else 'failed'}: {first}" if r else first
    return out


def _placement(host, plan, spec):
    from specfleet.campaign import dump_run_spec
    from specfleet.campaign.remote import RunFolder, RunSpecFile
    from specfleet.worker import layout
    d = layout.run_dir(work_dir(host), plan.campaign, host.name)
    # the configs role's own steps (runner files, the plan's dataset), then this campaign's run folder,
    # owned by the login user the runner runs as, and its run spec
    datasets = [] if plan.benchmark.on_worker else [plan.dataset_file()]
    return [*configs.steps(host, datasets), RunFolder(host.user, work_dir(host), plan.campaign, host.name),
            RunSpecFile(f"{d}/{layout.RUN_SPEC}", dump_run_spec(spec))]


def _follow(fleet, plan, rep, poll, runners: dict[str, int] | None = None, estimates=None, predicted=None):
    """Follow every runner until all are finished (specfleet.campaign.follow), then the campaign table;
    `estimates` (host -> configuration -> the split's seconds) give the progress lines' ETA."""
    from specfleet.campaign import remote
    from specfleet.campaign.follow import follow
    from specfleet.worker import layout
    follow(fleet, lambda hc: remote.view(hc, work_dir(hc.host), plan.campaign),
           lambda host: layout.run_dir(work_dir(host), plan.campaign, host.name), rep.console, poll,
           runners, on_end=lambda views: _end_table(rep, views, predicted), estimates=estimates)


def _end_table(rep, views, predicted):
    from specfleet.campaign.schedule.measured import makespan_line
    _campaign_table(rep, views)
    if predicted is not None:   # the split's prediction beside what the runners took
        rep.console.print(makespan_line(predicted, views), markup=False, soft_wrap=True)


def _campaign_table(rep, views):
    table = Table(title="campaign", title_justify="left")
    for col in ("host", "item", "status", "attempts", "error"):
        table.add_column(col, overflow="fold")
    for name, v in views.items():
        for item in (v.state or {}).get("items", []):
            table.add_row(name, item["name"], item["status"], str(item.get("attempts", "")),
                          (item.get("error") or "")[-300:])
    rep.console.print(table)


@task(help=fleet_help(changes=False, plan=PLAN_HELP))
def status(c, plan=None, inventory=None, hosts=None, forks=32, serial=False, accept_new_host_keys=False,
           verbose=False):
    """Show the progress of a running or finished campaign on every worker."""
    from specfleet.campaign import remote
    from specfleet.campaign.follow import progress_line
    from specfleet.slurm.hooks import on_slurm
    p = plan_of(plan)
    if on_slurm("status", inventory, hosts, p, vars_model()) is not None:
        return
    with fleet_run("status", inventory=inventory, hosts=hosts, forks=forks, serial=serial,
                   accept_new_host_keys=accept_new_host_keys, verbose=verbose, recap=False) as (fleet, inv, rep):
        views = fleet.each("read campaign state",
                           lambda hc: remote.view(hc, work_dir(hc.host), p.campaign)).values_by_host()
        for name, v in views.items():
            rep.console.print(progress_line(name, v), markup=False)
        _campaign_table(rep, views)


@task(help=fleet_help(changes=False, plan=PLAN_HELP))
def stop(c, plan=None, inventory=None, hosts=None, forks=32, serial=False, accept_new_host_keys=False,
         verbose=False):
    """Stop the runners cleanly: each stops its vLLM server, frees the GPU and exits (resumable later)."""
    from specfleet.campaign import remote
    from specfleet.slurm.hooks import on_slurm
    p = plan_of(plan)
    if on_slurm("stop", inventory, hosts, p, vars_model()) is not None:
        return
    with fleet_run("stop", inventory=inventory, hosts=hosts, forks=forks, serial=serial,
                   accept_new_host_keys=accept_new_host_keys, verbose=verbose) as (fleet, inv, rep):
        fleet.each("stop runner", lambda hc: remote.stop_campaign(hc, work_dir(hc.host), p.campaign))
