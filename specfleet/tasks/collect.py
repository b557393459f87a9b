"""`fab collect`: fetch finished results from the workers, gate on node equivalence, merge, report."""
from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from invoke import task

from specfleet.bench import remote
from specfleet.connection import ssh_argv
from specfleet.bench import NodeInfo, PlanError, split
from specfleet.step import Status, StepFailed
from specfleet.tasks.bench import DEFAULT_PLAN, PLAN_HELP, plan_of, work_dir
from specfleet.tasks.common import fleet_help, fleet_run

def includes_for(done: list[str]) -> list[str]:
    """rsync filters: the runner's state and queue, and for each finished item its results, log and marker only.

    A running item's files are never taken, so collect is safe while a campaign goes on.
    """
    rules = ["--include=state.json", "--include=run.json", "--include=runner.log"]
    for name in done:
        rules += [f"--include={name}.done", f"--include={name}_conc*.json", f"--include={name}.server.log"]
    return rules + ["--exclude=*"]


def finished_items(v: remote.RunnerView) -> list[str]:
    """Items with a done marker, except those the runner's state shows as not done: a configuration
    that changed is measured again under its old marker, which stays until the new run is done."""
    status = {i.get("name"): i.get("status") for i in (v.state or {}).get("items", []) if isinstance(i, dict)}
    return [n for n in v.done_markers if status.get(n, "done") == "done"]


BOOKKEEPING = ("state.json", "run.json", "runner.log")


def fetch(hc, plan, dest: Path, refused: dict[str, list[str]]):
    """rsync the finished items into a staging folder, then let only valid result files replace the
    local copies (specfleet.results.staging); invalid ones are quarantined and listed in `refused`."""
    v = remote.view(hc, work_dir(hc.host), plan.campaign)
    if not v.state and not v.done_markers:
        return Status.OK, "no campaign results on this host yet"
    # pandas & co load only when collecting
    from specfleet.results.campaign import Expect
    from specfleet.results.staging import accept, fresh_staging, quarantine_dir
    src = remote.run_dir(work_dir(hc.host), plan.campaign, hc.host.name)
    out = dest / hc.host.name
    out.mkdir(parents=True, exist_ok=True)
    stage = fresh_staging(dest, hc.host.name)
    done = finished_items(v)
    # Unchanged files are not fetched again: a file equal (size and mtime) to the local copy, or to
    # one an earlier collect quarantined (it would only be refused again). A re-run's new file differs.
    qdir = quarantine_dir(dest, hc.host.name).resolve()
    compare = [f"--compare-dest={out.resolve()}"] + ([f"--compare-dest={qdir}"] if qdir.is_dir() else [])
    argv = ["rsync", "-a", "--protect-args", "-e", shlex.join(ssh_argv(hc.host)), "--out-format=%i %n",
            *compare, *includes_for(done), "--", f"{hc.host.address}:{src}/", f"{stage}/"]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise StepFailed(f"rsync from {hc.host.name} failed (exit {p.returncode}): {p.stderr.strip()[-300:]}")
    got = accept(dest, hc.host.name, Expect.of_plan(plan))
    refused[hc.host.name] = got.refused
    from specfleet.results.provenance import parse_probe, probe_script, spec_facts
    model, (dataset, items) = (v.state or {}).get("model_path"), spec_facts(v.spec)
    res = hc.run(probe_script(hc.host.require("venv_path"), src, model, dataset), timeout=60)
    prov = json.dumps({"host": hc.host.name, **parse_probe(res.stdout, model, dataset), "items_facts": items,
                       "plan_hash": (v.state or {}).get("plan_hash"), "items_done": done,
                       "runner_status": (v.state or {}).get("status")}, indent=2) + "\n"
    pf = out / "provenance.json"
    if not pf.is_file() or pf.read_text() != prov:  # a collect that finds nothing new touches nothing
        pf.write_text(prov)
    if not [f for f in got.replaced if f not in BOOKKEEPING] and not got.refused:
        return Status.OK, f"nothing new ({len(done)} finished item(s) already here)"
    return Status.CHANGED, got.summary()


def _host_notes(fleet) -> dict[str, str]:
    """host -> why nothing came from it this time (for the report's missing cells)."""
    notes = {}
    for r in fleet.results:
        if r.status in (Status.FAILED, Status.UNREACHABLE) and r.host not in notes:
            what = "unreachable" if r.status is Status.UNREACHABLE else "failed"
            first = r.message.strip().splitlines()[0][:300] if r.message.strip() else "no message"
            notes[r.host] = f"{r.host} {what} at collect: {first}"
    return notes


@task(help=fleet_help(changes=False, plan=PLAN_HELP, results="where results go (default results/)",
                      force="merge even when the nodes are not equivalent; every output is stamped so"))
def collect(c, plan=None, inventory=None, hosts=None, results="results", force=False, forks=32, serial=False,
            accept_new_host_keys=False, verbose=False):
    """Fetch finished results, check the nodes agree on the baseline, merge and write the report."""
    p = plan_of(plan)
    dest = Path(results) / p.campaign
    with fleet_run("collect", inventory=inventory, hosts=hosts, forks=forks, serial=serial,
                   accept_new_host_keys=accept_new_host_keys, verbose=True,
                   default_hosts="workers") as (fleet, inv, rep):
        refused: dict[str, list[str]] = {}
        fleet.each("fetch results", lambda hc: fetch(hc, p, dest, refused))
        try:
            queues = split(p, [NodeInfo.from_vars(h.name, h.vars) for h in fleet.hosts]).queues
        except PlanError as e:
            queues = {}
            fleet.warn(f"cannot work out the planned queues of hosts without a run.json: {e}")
        bandwidth = next((h.var("gpu_memory_bandwidth_gbps") for h in fleet.hosts
                          if h.var("gpu_memory_bandwidth_gbps")), None)
        from specfleet.results.collect import report_plan  # heavy: pandas, matplotlib
        msgs = [m for h in sorted(refused) for m in refused[h]]
        outcome = report_plan(p, plan or DEFAULT_PLAN, results, force=force,
                              gpu_bandwidth_gbps=float(bandwidth) if bandwidth else None,
                              split_queues=queues, host_notes=_host_notes(fleet), notes=msgs,
                              console=rep.console)
        for m in msgs:
            fleet.warn(m)
        say(fleet, rep, outcome)


def say(fleet, rep, outcome) -> None:
    """The verdict: where the report is, or why nothing was merged; what it lacks (exit code)."""
    if outcome.merged:
        rep.console.print(f"[bold green]report:[/] {outcome.paths.get('html')}")
    else:
        fleet.not_merged(outcome.not_merged_message)
    if outcome.incomplete_message:
        fleet.incomplete(outcome.incomplete_message)
