"""Campaigns over SSH (the default backend): the bastion reads each worker, places the runner and its run
spec through the configs role, starts the runner detached (setsid, nohup: it outlives the connection),
follows it over SSH and fetches its finished results with rsync (specfleet/collect/fetch.py)."""
from __future__ import annotations

from pathlib import Path

from ..roles import Context, configs
from ..shell import q
from ..step import Status
from ..steps.command import Assert
from . import Fetched, Placement, Run, end_of_campaign


def work_dir(host) -> str:
    return host.var("bench_work_dir", f"{configs.home(host)}/campaigns")


def paths_for(host, plan):
    from ..campaign import Paths
    return Paths(venv=host.require("venv_path"), work_dir=work_dir(host), dataset=worker_dataset(host, plan))


def worker_dataset(host, plan) -> str:
    """The dataset's path on the worker: as the plan spells it, or where configs places the bastion file."""
    return plan.benchmark.on_worker or configs.dataset_path(host, plan.dataset_file())


def dataset_on_worker(host, plan) -> Assert:
    path = plan.benchmark.on_worker
    return Assert("dataset on the worker", f"test -f {q(path)} && test -r {q(path)}",
                  f"{plan.file}: field 'benchmark.dataset_path': {path} is not a readable file on {host.name} "
                  "(put it there, or name a bastion file, which fab bench places on every worker)")


def placement_steps(host, plan, spec):
    """The configs role's own steps (runner files, the plan's dataset), then this campaign's run folder,
    owned by the login user the runner runs as, and its run spec."""
    from ..campaign import dump_run_spec
    from ..campaign.remote import RunFolder, RunSpecFile
    from ..worker import layout
    d = layout.run_dir(work_dir(host), plan.campaign, host.name)
    datasets = [] if plan.benchmark.on_worker else [plan.dataset_file()]
    return [*configs.steps(host, datasets), RunFolder(host.user, work_dir(host), plan.campaign, host.name),
            RunSpecFile(f"{d}/{layout.RUN_SPEC}", dump_run_spec(spec))]


def left_out(fleet, placed: set[str]) -> dict[str, str]:
    """Each host this bench was asked for but placed nothing on, with why (the report names it)."""
    out = {}
    for h in fleet.hosts:
        if h.name in placed:
            continue
        r = next((r for r in fleet.results if r.host == h.name and r.status in (Status.FAILED, Status.UNREACHABLE)),
                 None)
        first = r.message.strip().splitlines()[0][:300] if r and r.message.strip() else "no GPUs read"
        out[h.name] = f"{'unreachable' if r and r.status is Status.UNREACHABLE else 'failed'}: {first}" if r else first
    return out


class SshBackend:
    kind = "ssh"

    def place(self, run: Run, *, pins, gate_runs: int, results: Path,
              durations_from: str | None = None) -> Placement | None:
        from ..campaign import build_run_spec, commands_for, format_split, split
        from ..campaign.schedule import measured
        from ..campaign.remote import ReadWorker
        from ..campaign.spec import RunnerBusy, resumed
        from ..errors import UserError
        fleet, p, console = run.fleet, run.plan, run.console
        # one probe batch per worker: its GPUs and topology (the split's slots) and its campaign's state
        # (resume, reattach), with the plan's dataset check; a host that fails here leaves the split
        reads = fleet.facts(lambda h: [ReadWorker(h, work_dir(h), p.campaign)]
                            + ([dataset_on_worker(h, p)] if p.benchmark.on_worker else [])).values_by_host()
        split_hosts = [h for h in fleet.active if reads.get(h.name)]
        nodes = [reads[h.name].node for h in split_hosts]
        if not nodes:
            return None
        queues = split(p, nodes, pins=pins,
                       **measured.for_split(p, {h.name: reads[h.name].view for h in split_hosts}, durations_from))
        console.print(format_split(queues, nodes), markup=False)
        paths = {}
        for host in split_hosts:
            try:
                paths[host.name] = paths_for(host, p)
            except UserError as e:  # e.g. a var this host lacks: it fails alone
                fleet.record_local_for(host.name, "inventory vars", Status.FAILED, str(e))
                continue
            console.print(f"[bold]{host.name}[/]: " + " -> ".join(queues.queues[host.name]))
            if run.verbose or run.check:  # the full command lines (hundreds of characters each) on request only
                for item in queues.queues[host.name]:
                    for line in commands_for(p, host.name, item, paths[host.name]):
                        console.print(f"    {line}", markup=False, soft_wrap=True)
            if p.baseline in queues.queues[host.name] and gate_runs > p.benchmark.repeat:
                console.print(f"    gate runs: {p.baseline} at concurrency {p.equivalence.concurrency}, runs "
                              f"{p.benchmark.repeat + 1}-{gate_runs}, each on its own server start", markup=False)
        if run.check:
            return None
        if not run.verbose:
            console.print("[dim](--verbose or --check prints each server's and bench client's full command line)[/]")
        from ..report.scan.cells import write_placed  # here: fab's start-up stays lean
        write_placed(p, queues.queues, results / p.campaign, left_out(fleet, {h.name for h in split_hosts}))
        specs = {}
        for host in [h for h in split_hosts if h in fleet.active and h.name in paths]:
            v, node = reads[host.name].view, reads[host.name].node
            spec = build_run_spec(p, host.name, queues.queues[host.name], paths[host.name],
                                  env_file=host.var("env_file"), gpu_index=host.var("gpu_index"),
                                  gpus=list(node.gpus), gpu_groups=node.gpu_groups, gate_runs=gate_runs)
            try:
                specs[host.name] = resumed(spec, v and v.spec, v.runner_pid if v and v.alive else None)
            except RunnerBusy as e:
                fleet.record_local_for(host.name, "start runner", Status.FAILED, str(e))
        fleet.play(lambda h: placement_steps(h, p, specs[h.name]), hosts=[h for h in fleet.active if h.name in specs])
        estimates = {h: {c: queues.durations[c][h] for c in queues.queues[h] if h in queues.durations.get(c, {})}
                     for h in specs}
        return Placement(queues.queues, estimates, detail={h: reads[h].view for h in specs}, split=queues)

    def start(self, run: Run, placement: Placement, *, wait: bool, poll: float) -> None:
        from ..campaign import remote
        fleet, p = run.fleet, run.plan
        views = placement.detail
        fleet.interrupt_hints = [  # on Ctrl-C from here on
            "the runners already started go on without fab (they are detached from SSH);",
            f"reattach: `{run.command}` again (or resume, if one stopped); progress: "
            f"`fab status --plan {run.plan_arg}`; stop them: `fab stop --plan {run.plan_arg}`"]

        def start_one(hc):
            v = views.get(hc.host.name)
            return remote.start_or_reattach(hc, work_dir(hc.host), p.campaign, hc.host.require("runner_python"),
                                            configs.runner_path(hc.host), resuming=bool(v and v.state))
        started = fleet.each("start runner", start_one, hosts=[h for h in fleet.active if h.name in views])
        if wait:  # the runner each host's start followed (its pid): this run follows that one
            runners = {h: s.pid for h, s in started.values_by_host().items() if s.pid is not None}
            self._follow(run, runners, placement, poll)

    def _follow(self, run: Run, runners: dict[str, int], placement: Placement, poll: float) -> None:
        """Every runner until all are finished (specfleet.campaign.follow), then the campaign table and
        the makespan; the placement's estimates (host -> configuration -> seconds) give the ETA."""
        from ..campaign import remote
        from ..campaign.follow import follow
        from ..worker import layout
        p = run.plan
        follow(run.fleet, lambda hc: remote.view(hc, work_dir(hc.host), p.campaign),
               lambda host: layout.run_dir(work_dir(host), p.campaign, host.name), run.console, poll,
               runners, on_end=lambda views: end_of_campaign(run.console, views, placement.split),
               estimates=placement.estimates)

    def view(self, run: Run):
        from ..campaign import remote
        return run.fleet.each("read campaign state",
                              lambda hc: remote.view(hc, work_dir(hc.host), run.plan.campaign)).values_by_host()

    def stop(self, run: Run) -> None:
        from ..campaign import remote
        run.fleet.each("stop runner", lambda hc: remote.stop_campaign(hc, work_dir(hc.host), run.plan.campaign))

    def fetch(self, run: Run, dest: Path) -> Fetched:
        from ..bastion_io import BastionStorageError
        from ..collect.fetch import fetch
        outs = run.fleet.each("fetch results", lambda hc: fetch(hc, run.plan, work_dir(hc.host), dest))
        faults = [o.error for o in outs.values() if isinstance(o.error, BastionStorageError)]
        if faults:  # the bastion's disk, not a host: the task's one line and exit code
            raise faults[0]
        got = outs.values_by_host()  # each host's HostFetch
        return Fetched(refused={h: f.refused for h, f in got.items() if f.refused is not None},
                       running={h: f.running for h, f in got.items() if f.running})

    def provision(self, run: Run, roles: list, undo, *, partial: bool, options: dict) -> None:
        from ..roles import apply
        ctx = Context(inventory=run.inv, fleet=run.fleet, console=run.console, check=run.check, options=options)
        if undo:
            apply.revert(ctx, undo)
        else:
            apply.provision(ctx, roles)
