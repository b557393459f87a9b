"""`fab collect`: fetch finished results from the workers, gate on node equivalence, merge, report."""
from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from invoke import task

from specfleet.bench import remote
from specfleet.connection import ssh_argv
from specfleet.fleet import EXIT_NOT_MERGED
from specfleet.step import Status, StepFailed
from tasks.bench import PLAN_HELP, plan_of, work_dir
from tasks.common import fleet_help, fleet_run

def includes_for(done: list[str]) -> list[str]:
    """rsync filters: the state file, and for each finished item its results, log and marker only.

    A running item's files are never taken, so collect is safe while a campaign goes on.
    """
    rules = ["--include=state.json", "--include=runner.log"]
    for name in done:
        rules += [f"--include={name}.done", f"--include={name}_conc*.json", f"--include={name}.server.log"]
    return rules + ["--exclude=*"]


def finished_items(v: remote.RunnerView) -> list[str]:
    """Items with a done marker, except those the runner's state shows as not done: a configuration
    that changed is measured again under its old marker, which stays until the new run is done."""
    status = {i.get("name"): i.get("status") for i in (v.state or {}).get("items", []) if isinstance(i, dict)}
    return [n for n in v.done_markers if status.get(n, "done") == "done"]


def fetch(hc, plan, dest: Path):
    v = remote.view(hc, work_dir(hc.host), plan.campaign)
    if not v.state and not v.done_markers:
        return Status.OK, "no campaign results on this host yet"
    src = remote.run_dir(work_dir(hc.host), plan.campaign, hc.host.name)
    out = dest / hc.host.name
    out.mkdir(parents=True, exist_ok=True)
    done = finished_items(v)
    # A file that an earlier collect quarantined (moved away) is not fetched again while the worker's
    # copy is the same (size and mtime): it would only be quarantined once more, on every collect.
    # A re-run's new file differs and is fetched.
    from specfleet.results.campaign import QUARANTINE_DIR  # pandas & co load only when collecting
    qdir = (dest / QUARANTINE_DIR / hc.host.name).resolve()
    compare = [f"--compare-dest={qdir}"] if qdir.is_dir() else []
    argv = ["rsync", "-a", "--protect-args", "-e", shlex.join(ssh_argv(hc.host)), "--out-format=%i %n",
            *compare, *includes_for(done), "--", f"{hc.host.address}:{src}/", f"{out}/"]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise StepFailed(f"rsync from {hc.host.name} failed (exit {p.returncode}): {p.stderr.strip()[-300:]}")
    fetched = [ln.split(" ", 1)[1] for ln in p.stdout.splitlines() if ln.startswith(">f")]
    from specfleet.results.provenance import parse_probe, probe_script, spec_facts
    model, (dataset, items) = (v.state or {}).get("model_path"), spec_facts(v.spec)
    res = hc.run(probe_script(hc.host.require("venv_path"), src, model, dataset), timeout=60)
    prov = json.dumps({"host": hc.host.name, **parse_probe(res.stdout, model, dataset), "items_facts": items,
                       "plan_hash": (v.state or {}).get("plan_hash"), "items_done": done,
                       "runner_status": (v.state or {}).get("status")}, indent=2) + "\n"
    pf = out / "provenance.json"
    if not pf.is_file() or pf.read_text() != prov:  # a collect that finds nothing new touches nothing
        pf.write_text(prov)
    if not [f for f in fetched if f not in ("state.json", "runner.log")]:
        return Status.OK, f"nothing new ({len(done)} finished item(s) already here)"
    return Status.CHANGED, f"fetched {len(fetched)} file(s): {', '.join(sorted(fetched))}"


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
        fleet.each("fetch results", lambda hc: fetch(hc, p, dest))
        bandwidth = next((h.var("gpu_memory_bandwidth_gbps") for h in fleet.hosts
                          if h.var("gpu_memory_bandwidth_gbps")), None)
        from specfleet.results import EquivalenceRule, report_campaign  # heavy: pandas, matplotlib
        rule = EquivalenceRule(metric=p.equivalence.metric, concurrency=p.equivalence.concurrency,
                               tolerance_pct=p.equivalence.tolerance_pct)
        outcome = report_campaign(dest, baseline=p.baseline, rule=rule, force=force,
                                  gpu_bandwidth_gbps=float(bandwidth) if bandwidth else None,
                                  weights_gib=p.model.weights_gib, console=rep.console)
        if outcome.merged:
            rep.console.print(f"[bold green]report:[/] {outcome.paths.get('html', dest / 'report.html')}")
        else:
            fleet.not_merged(outcome.error or "the nodes are not equivalent: nothing merged "
                             "(see the table above; --force merges and stamps the outputs)")
