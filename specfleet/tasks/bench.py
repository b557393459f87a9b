"""`fab bench`, `fab status`, `fab stop`: run a campaign's queues on the workers, detached from SSH."""
from __future__ import annotations

import time

from invoke import task
from invoke.exceptions import Exit
from rich.table import Table

from specfleet.roles import configs
from specfleet.bench import NodeInfo, Paths, PlanError, build_run_spec, commands_for, dump_run_spec, load_plan
from specfleet.bench import format_split, parse_pins, split
from specfleet.bench import remote
from specfleet.bench.spec import RUNNER_FILES
from specfleet.connection import CommandTimeout, Unreachable
from specfleet.errors import UserError
from specfleet.fleet import EXIT_BAD_INPUT
from specfleet.shell import q
from specfleet.step import Status
from specfleet.steps.command import Assert
from specfleet.steps.files import Directory, FileContent
from specfleet.tasks.common import command_line, fleet_help, fleet_run

DEFAULT_PLAN = "plans/qwen3-32b.yml"
PLAN_HELP = f"the campaign's plan file (default {DEFAULT_PLAN})"


def plan_of(path: str | None):
    try:
        return load_plan(path or DEFAULT_PLAN)
    except PlanError as e:
        raise Exit(f"error: {e}", code=EXIT_BAD_INPUT) from None


def work_dir(host) -> str:
    return host.var("bench_work_dir", f"{configs.home(host)}/campaigns")


def paths_for(host, plan) -> Paths:
    return Paths(venv=host.require("venv_path"), work_dir=work_dir(host), dataset=worker_dataset(host, plan))


def worker_dataset(host, plan) -> str:
    """The dataset's path on the worker: as the plan spells it, or where configs places the bastion file."""
    return plan.benchmark.on_worker or configs.dataset_path(host, plan.dataset_file())


def _dataset_on_worker(host, plan) -> Assert:
    path = plan.benchmark.on_worker
    return Assert("dataset on the worker", f"test -f {q(path)} && test -r {q(path)}",
                  f"{plan.file}: field 'benchmark.dataset_path': {path} is not a readable file on {host.name}")


@task(help=fleet_help(plan=PLAN_HELP, assign="pin configurations to nodes, e.g. eagle3=w2 (repeatable)",
                      wait="follow progress until every runner is done (default; --no-wait returns at once)",
                      poll="seconds between progress reads (default 2)"), iterable=["assign"])
def bench(c, plan=None, inventory=None, hosts=None, check=False, diff=False, assign=None, wait=True, poll=2.0,
          forks=32, serial=False, accept_new_host_keys=False, verbose=False):
    """Split the plan's configurations across the nodes and run each node's queue (resumable, reattaches)."""
    p = plan_of(plan)
    p.dataset_file()  # a missing bastion file (PlanError, a UserError) stops here, before any host is touched
    with fleet_run("bench", inventory=inventory, hosts=hosts, check=check, diff=diff, forks=forks, serial=serial,
                   accept_new_host_keys=accept_new_host_keys, verbose=verbose,
                   default_hosts="workers") as (fleet, inv, rep):
        try:
            nodes = [NodeInfo.from_vars(h.name, h.vars) for h in fleet.hosts]
            queues = split(p, nodes, pins=parse_pins(assign or []))
        except PlanError as e:
            raise Exit(f"error: {e}", code=EXIT_BAD_INPUT) from None
        rep.console.print(format_split(queues), markup=False)
        paths = {}
        for host in fleet.hosts:
            try:
                paths[host.name] = paths_for(host, p)
            except UserError as e:  # e.g. a var this host lacks: it fails alone
                fleet.record_local_for(host.name, "inventory vars", Status.FAILED, str(e))
                continue
            rep.console.print(f"[bold]{host.name}[/]: " + " -> ".join(queues.queues[host.name]))
            for item in queues.queues[host.name]:
                for line in commands_for(p, host.name, item, paths[host.name]):
                    rep.console.print(f"    {line}", markup=False, soft_wrap=True)
        if p.benchmark.on_worker:  # check mode too: the file the plan says is there must be
            fleet.play(lambda h: [_dataset_on_worker(h, p)])
        if check:
            return
        views = fleet.each("read campaign state", lambda hc: remote.view(hc, work_dir(hc.host), p.campaign))
        specs = {}
        for host in fleet.active:
            v = views.get(host.name)
            spec = build_run_spec(p, host.name, queues.queues[host.name], paths[host.name],
                                  env_file=host.var("env_file"), gpu_index=host.var("gpu_index"))
            if v and v.spec and v.spec.get("plan_hash") == spec["plan_hash"] and \
                    [i["name"] for i in v.spec["items"]] == [i["name"] for i in spec["items"]]:
                spec["run_id"] = v.spec["run_id"]  # same campaign: resume it, keep its identity
            elif v and v.alive:
                fleet.record_local_for(host.name, "start runner", Status.FAILED,
                                       f"a runner for another plan or queue is running (pid {v.runner_pid}); "
                                       "`fab stop` it first")
                continue
            specs[host.name] = spec
        fleet.play(lambda h: _placement(h, p, specs[h.name]),
                   hosts=[h for h in fleet.active if h.name in specs])
        fleet.interrupt_hints = [  # on Ctrl-C from here on
            "the runners already started go on without fab (they are detached from SSH);",
            f"reattach: `{command_line()}` again (or resume, if one stopped); progress: "
            f"`fab status --plan {plan or DEFAULT_PLAN}`; stop them: `fab stop --plan {plan or DEFAULT_PLAN}`"]

        runners: dict[str, int] = {}  # host -> the runner this run follows

        def start(hc):
            v = views.get(hc.host.name)
            fresh = remote.view(hc, work_dir(hc.host), p.campaign)
            if fresh.alive:
                runners[hc.host.name] = fresh.runner_pid
                return Status.OK, f"reattached to runner pid {fresh.runner_pid}"
            d = remote.run_dir(work_dir(hc.host), p.campaign, hc.host.name)
            pid = remote.start(hc, hc.host.var("runner_python", "/usr/bin/python3"), configs.runner_path(hc.host),
                               f"{d}/run.json", f"{d}/runner.log")
            holder = remote.settle(hc, pid, work_dir(hc.host))
            if holder is None:
                return Status.FAILED, f"the runner exited at once: see {d}/runner.log"
            runners[hc.host.name] = holder
            if holder != pid:  # another `fab bench` started one at the same instant and won the lock
                return Status.OK, f"following runner pid {holder} (another fab bench started it just now)"
            resumed = " (resuming)" if v and v.state else ""
            return Status.CHANGED, f"started runner pid {pid}{resumed}"
        fleet.each("start runner", start, hosts=[h for h in fleet.active if h.name in specs])
        if wait:
            _follow(fleet, p, rep, poll, runners)


def _placement(host, plan, spec):
    d = remote.run_dir(work_dir(host), plan.campaign, host.name)
    home = configs.home(host)
    return [Directory(home), Directory(f"{home}/datasets"), Directory(d),
            *[FileContent(f"{home}/{f.name}", f.read_bytes(), mode="0755") for f in RUNNER_FILES],
            *([] if plan.benchmark.on_worker else [configs.dataset_step(host, plan.dataset_file())]),
            FileContent(f"{d}/run.json", dump_run_spec(spec))]


REBOOTED = ("host rebooted (its runner and server are gone): run `fab provision` (mounts, GPU modules), "
            "then `fab bench` to resume")
DEAD_GRACE_S = 15.0  # a runner not running this long, its queue unfinished: stop following that host


def _follow(fleet, plan, rep, poll, runners: dict[str, int] | None = None):
    """Read every runner's state until all are finished; a dropped connection is retried, not fatal.

    A host whose runner is gone while its queue is unfinished (runner killed, host rebooted, runner
    that could not start) is reported failed after DEAD_GRACE_S instead of being followed forever.
    `runners` (host -> runner PID started or reattached to): until that runner has written its own
    state.json, the state there is an earlier runner's, and its "done"/"stopped" ends nothing.
    """
    runners = runners or {}

    def finished(name: str) -> bool:
        v = views.get(name)
        return bool(v) and v.finished and (name not in runners or v.state.get("runner_pid") == runners[name])

    last: dict[str, str] = {}
    views: dict[str, remote.RunnerView] = {}
    dead_since: dict[str, float] = {}
    gave_up: set[str] = set()
    while True:
        following = [h for h in fleet.active if h.name not in gave_up]
        if not following:
            break
        for host in following:
            hc = fleet.connections[host.name]
            try:
                views[host.name] = remote.view(hc, work_dir(host), plan.campaign)
            except (Unreachable, CommandTimeout, OSError) as e:
                hc.close()
                line = f"{host.name}: connection lost ({e}); retrying"
                if last.get(host.name) != line:
                    rep.console.print(f"[magenta]{line}[/]")
                    last[host.name] = line
                continue
            v = views[host.name]
            line = _progress_line(host.name, v)
            if last.get(host.name) != line:
                rep.console.print(line, markup=False)
                last[host.name] = line
            if v.alive or finished(host.name):
                dead_since.pop(host.name, None)
            elif time.monotonic() - dead_since.setdefault(host.name, time.monotonic()) >= DEAD_GRACE_S:
                gave_up.add(host.name)
                d = remote.run_dir(work_dir(host), plan.campaign, host.name)
                fleet.record_local_for(host.name, "follow runner", Status.FAILED, (
                    REBOOTED if v.rebooted else
                    "the runner is not running and its queue is unfinished (killed, or the "
                    f"host rebooted? see {d}/runner.log): run `fab bench` again to resume"))
        if all(finished(h.name) for h in following if h.name not in gave_up):
            break
        time.sleep(poll)
    _campaign_table(rep, views)
    for name, v in views.items():
        done, failed, left = v.counts()
        if v.rebooted and left and name not in gave_up:  # the shutdown stopped the runner "cleanly"
            fleet.record_local_for(name, "follow runner", Status.FAILED, REBOOTED)
        for item in (v.state or {}).get("items", []):
            if item["status"] == "failed":
                fleet.record_local_for(name, f"item {item['name']}", Status.FAILED, item.get("error") or "failed")


def _progress_line(name: str, v: remote.RunnerView) -> str:
    if not v.state:
        return f"{name}: runner starting"
    done, failed, left = v.counts()
    cur = next((i for i in v.state["items"] if i["name"] == v.state.get("current")), None)
    where = f"{cur['name']}: {cur['status']} ({cur.get('phase') or ''})" if cur else v.state.get("status")
    alive = "" if v.alive or v.finished else " [runner not running: run `fab bench` again to resume]"
    return f"{name}: {where} | done {done}, failed {failed}, left {left}{alive}"


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
    p = plan_of(plan)
    with fleet_run("status", inventory=inventory, hosts=hosts, forks=forks, serial=serial,
                   accept_new_host_keys=accept_new_host_keys, verbose=verbose, default_hosts="workers",
                   recap=False) as (fleet, inv, rep):
        views = fleet.each("read campaign state", lambda hc: remote.view(hc, work_dir(hc.host), p.campaign))
        for name, v in views.items():
            rep.console.print(_progress_line(name, v), markup=False)
        _campaign_table(rep, views)


@task(help=fleet_help(changes=False, plan=PLAN_HELP))
def stop(c, plan=None, inventory=None, hosts=None, forks=32, serial=False, accept_new_host_keys=False,
         verbose=False):
    """Stop the runners cleanly: each stops its vLLM server, frees the GPU and exits (resumable later)."""
    p = plan_of(plan)
    with fleet_run("stop", inventory=inventory, hosts=hosts, forks=forks, serial=serial,
                   accept_new_host_keys=accept_new_host_keys, verbose=verbose,
                   default_hosts="workers") as (fleet, inv, rep):
        def one(hc):
            v = remote.view(hc, work_dir(hc.host), p.campaign)
            if not v.alive:
                return Status.OK, "no runner running"
            if not remote.stop(hc, v.runner_pid):
                return Status.FAILED, f"runner pid {v.runner_pid} did not exit within the timeout"
            return Status.CHANGED, f"stopped runner pid {v.runner_pid}"
        fleet.each("stop runner", one)
