"""`fab collect`'s fetch: each worker's finished items into results/<campaign>/<host>/, with the host's
provenance. Only valid result files replace the local copies (staging.py); a running item's files
are never taken, so collect is safe while a campaign goes on.

Light to import (fab loads it at start): pandas & co load only when a fetch runs.
"""
from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from ..campaign import remote
from ..worker import layout
from ..connection import ssh_argv
from ..step import Status, StepFailed

BOOKKEEPING = (layout.STATE, layout.RUN_SPEC, layout.RUNNER_LOG)


def includes_for(done: list[str]) -> list[str]:
    """rsync filters: the runner's state and queue, and for each finished item its results, log and marker only."""
    rules = [f"--include={f}" for f in BOOKKEEPING]
    for name in done:
        rules += [f"--include={layout.done_marker(name)}", f"--include={layout.result_glob(name)}",
                  f"--include={layout.server_log(name)}"]
    return rules + ["--exclude=*"]


def finished_items(v: remote.RunnerView) -> list[str]:
    """Items with a done marker, except those the runner's state shows as not done: a configuration
    that changed is measured again under its old marker, which stays until the new run is done."""
    status = {i.get("name"): i.get("status") for i in (v.state or {}).get("items", []) if isinstance(i, dict)}
    return [n for n in v.done_markers if status.get(n, "done") == "done"]


def fetch(hc, plan, work_dir: str, dest: Path, refused: dict[str, list[str]]):
    """rsync the finished items of `hc`'s run folder under `work_dir` into a staging folder, then let
    only valid result files replace the local copies in `dest`/<host> (specfleet.results.staging);
    invalid ones are quarantined and listed in `refused`. Writes the host's provenance.json."""
    v = remote.view(hc, work_dir, plan.campaign)
    if not v.state and not v.done_markers:
        return Status.OK, "no campaign results on this host yet"
    from .campaign import Expect
    from .staging import accept, fresh_staging, quarantine_dir
    src = layout.run_dir(work_dir, plan.campaign, hc.host.name)
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
    write_provenance(hc, v, src, done, out / layout.PROVENANCE)
    if not [f for f in got.replaced if f not in BOOKKEEPING] and not got.refused:
        return Status.OK, f"nothing new ({len(done)} finished item(s) already here)"
    return Status.CHANGED, got.summary()


def write_provenance(hc, v: remote.RunnerView, src: str, done: list[str], pf: Path) -> None:
    """Probe the host (one round trip: provenance.probe_script) and write what it says to `pf`;
    a collect that finds nothing new touches nothing."""
    from .provenance import parse_probe, probe_script, spec_facts
    model, (dataset, items) = (v.state or {}).get("model_path"), spec_facts(v.spec)
    res = hc.run(probe_script(hc.host.require("venv_path"), src, model, dataset), timeout=60)
    prov = json.dumps({"host": hc.host.name, **parse_probe(res.stdout, model, dataset), "items_facts": items,
                       "plan_hash": (v.state or {}).get("plan_hash"), "items_done": done,
                       "runner_status": (v.state or {}).get("status")}, indent=2) + "\n"
    if not pf.is_file() or pf.read_text() != prov:
        pf.write_text(prov)


def host_notes(results) -> dict[str, str]:
    """host -> why nothing came from it this time (for the report's missing cells), from the fleet's results."""
    notes = {}
    for r in results:
        if r.status in (Status.FAILED, Status.UNREACHABLE) and r.host not in notes:
            what = "unreachable" if r.status is Status.UNREACHABLE else "failed"
            first = r.message.strip().splitlines()[0][:300] if r.message.strip() else "no message"
            notes[r.host] = f"{r.host} {what} at collect: {first}"
    return notes
