"""`fab collect`'s fetch: each worker's finished items into results/<campaign>/<host>/, with the host's
provenance. Only valid result files replace the local copies (staging.py); a running item's files
are never taken, so collect is safe while a campaign goes on.

Light to import (fab loads it at start): pandas & co load only when a fetch runs.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import json
import shlex
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..campaign import remote
from ..facts.runner_state import RunnerView
from ..worker import layout
from ..worker.runspec import Item
from ..connection import ssh_argv
from ..quoting import q
from ..step import HostStatus, Status, StepFailed
from .. import bastion_io

if TYPE_CHECKING:
    from ..facts.worker_provenance import ProvenanceRecord

BOOKKEEPING = (layout.STATE, layout.RUN_SPEC, layout.RUNNER_LOG)


def wanted(name: str, done: list[str]) -> bool:
    """Whether a run folder entry is one collect takes: the runner's state and queue, and for each
    finished item its results, log and marker (fnmatch on plain names only: a done marker's name
    comes from the worker)."""
    if name in BOOKKEEPING:
        return True
    return any(name in (layout.done_marker(n), layout.server_log(n))
               or fnmatch.fnmatchcase(name, layout.result_glob(n))
               or fnmatch.fnmatchcase(name, layout.telemetry_file(layout.result_glob(n)))
               for n in done)


def select(listed, done: list[str], limits) -> tuple[list[str], list[tuple[str, str]]]:
    """The entries of a run folder listing (untrusted.parse_listing) to fetch, and those refused
    with the rule each broke (untrusted.refusal); entries collect does not want are left alone."""
    from .untrusted import refusal
    take, bad = [], []
    for name, kind, nlink, size in listed:
        if wanted(name, done):
            why = refusal(name, kind, nlink, size, limits)
            (bad.append((name, why)) if why else take.append(name))
    return take, bad


def rsync_argv(source: str, stage: Path, ssh: str | None, compare: list[str], limits) -> list[str]:
    """rsync of the names given on stdin (NUL-separated: any name is a name) from `source` into `stage`.
    -lt, not -a: links stay links (refused on the bastion by lstat, never followed), no devices or
    specials, no owners or modes from the worker; no file over the largest limit."""
    return ["rsync", "-lt", "--protect-args", "--from0", "--files-from=-", f"--max-size={limits.largest}",
            *(["-e", ssh] if ssh else []), "--out-format=%i %n", *compare, "--", source, f"{stage}/"]


def finished_items(v: RunnerView) -> list[str]:
    """Items with a done marker, except those the runner's state shows as not done: a configuration
    that changed is measured again under its old marker, which stays until the new run is done."""
    status = {i.get("name"): i.get("status") for i in (v.state or {}).get("items", []) if isinstance(i, dict)}
    return [n for n in v.done_markers if status.get(n, "done") == "done" and not set(n) & set("*?[]\\")]


@dataclass(frozen=True)
class HostFetch(HostStatus):
    """One host's fetch: its status and message, the result files refused (one line each; None when
    nothing was listed) and, while its runner still runs, which runner (the report then does not advise
    measuring its unfinished cells again)."""

    refused: list[str] | None = None
    running: str | None = None


def fetch(hc, plan, work_dir: str, dest: Path) -> HostFetch:
    """rsync the finished items of `hc`'s run folder under `work_dir` into a staging folder, then let
    only valid result files replace the local copies in `dest`/<host> (specfleet.collect.staging);
    invalid ones are quarantined and named in the answer. Writes the host's provenance.json."""
    v = remote.view(hc, work_dir, plan.campaign)
    running = f"runner pid {v.runner_pid}" if v.alive else None
    if not v.state and not v.done_markers:
        return HostFetch(Status.OK, "no campaign results on this host yet", running=running)
    from ..facts.worker_provenance import WorkerProvenance
    src = layout.run_dir(work_dir, plan.campaign, hc.host.name)

    def probe(model, dataset):
        fact = WorkerProvenance(hc.host.require("venv_path"), src, model, dataset)
        res = hc.run(fact.command(), timeout=60)
        return fact.parse(res.stdout, res.exited)
    try:
        return dataclasses.replace(take_finished(
            hc.host.name, plan, dest, v, src, lambda script: hc.run(script, timeout=60).stdout,
            f"{hc.host.address}:{src}/", shlex.join(ssh_argv(hc.host)), probe,
            **bandwidth_given(hc.host.var("gpu_memory_bandwidth_gbps"))), running=running)
    except OSError as e:  # the bastion's own storage: one line and its exit code (bastion_io), never a crash
        if (err := bastion_io.of_oserror(e, dest)) is None:
            raise
        raise err from None


def take_finished(host: str, plan, dest: Path, v: RunnerView, src: str, run: Callable[[str], str], source: str,
                  ssh: str | None, probe: Callable[[str | None, str | None], ProvenanceRecord],
                  **provenance) -> HostFetch:
    """The finished items of the run folder `src` (listed by `run`, a shell on the worker or, under
    Slurm, on the bastion), fetched from `source` and accepted (take_files), then the host's
    provenance.json (write_provenance); the host's status, message and refused files."""
    from .staging import refuse_unfetched
    from .untrusted import Limits, listing_script, parse_listing
    limits = Limits.of_plan(plan)
    done = finished_items(v)
    # the worker is untrusted: list first (find never follows a link), fetch only what passes
    take, bad = select(parse_listing(run(listing_script(q(src)))), done, limits)
    got = take_files(host, plan, dest, source, ssh, take, limits)
    got.refused += refuse_unfetched(dest, host, bad)
    write_provenance(dest / host / layout.PROVENANCE, host, v, done, probe, **provenance)
    if not [f for f in got.replaced if f not in BOOKKEEPING] and not got.refused:
        return HostFetch(Status.OK, f"nothing new ({len(done)} finished item(s) already here)", refused=got.refused)
    return HostFetch(Status.CHANGED, got.summary(), refused=got.refused)


def take_files(host: str, plan, dest: Path, source: str, ssh: str | None, take: list[str], limits):
    """rsync `take` from `source` (a worker over `ssh`, or a local folder: Slurm's shared path) into
    the host's staging folder and let staging.accept place what is valid; the staging folder is gone
    afterwards, whatever happened."""
    from ..resultfile.check import Expect
    from .staging import accept, fresh_staging, quarantine_dir
    out = dest / host
    out.mkdir(parents=True, exist_ok=True)
    stage = fresh_staging(dest, host)
    # Unchanged files are not fetched again: a file equal (size and mtime) to the local copy, or to
    # one an earlier collect quarantined (it would only be refused again). A re-run's new file differs.
    qdir = quarantine_dir(dest, host).resolve()
    compare = [f"--compare-dest={out.resolve()}"] + ([f"--compare-dest={qdir}"] if qdir.is_dir() else [])
    argv = rsync_argv(source, stage, ssh, compare, limits)
    try:
        if take:
            p = subprocess.run(argv, input="".join(n + "\0" for n in take), capture_output=True, text=True)
            if p.returncode not in (0, 24):  # 24: a file vanished after the listing (it is not taken)
                raise bastion_io.of_rsync(p.stderr, dest) or StepFailed(rsync_failure(host, p.returncode, p.stderr))
        return accept(dest, host, Expect.of_plan(plan), limits)
    finally:
        discard_staging(dest, host)


def rsync_failure(host: str, code: int, stderr: str) -> str:
    """One line for a failed rsync; a signal is named (exits.exit_status), never `exit -9`."""
    from ..exits import exit_status
    tail = " ".join(stderr.split())[-300:]
    if code < 0:
        return (f"{exit_status(f'rsync from {host}', code)} (nothing of it was taken; `fab collect` again "
                f"fetches it){': ' + tail if tail else ''}")
    return f"rsync from {host} failed (exit {code}): {tail or '(no error output)'}"


def discard_staging(dest: Path, host: str) -> None:
    """The host's staging folder goes, and `.staging/` itself once no other host uses it."""
    import shutil
    from .staging import STAGING_DIR, staging_dir
    shutil.rmtree(staging_dir(dest, host), ignore_errors=True)
    try:
        (Path(dest) / STAGING_DIR).rmdir()
    except OSError:
        pass  # another host's staging is in use, or it is gone already


def spec_facts(spec: dict | None) -> tuple[str | None, dict[str, dict]]:
    """(dataset path, {item: {"sampling": {...}, "serve_argv": [...]}}) from the worker's run spec:
    what the client sends and the server's command line as the printed plan shows it (runspec.py)."""
    dataset, items = None, {}
    for it in (spec or {}).get("items", []) if isinstance(spec, dict) else []:
        try:   # item by item: the worker's file is untrusted, and may be an older specfleet's
            item = Item.from_json(it)
        except ValueError:  # an older spec (argv lists) or a damaged one: not recorded
            continue
        dataset = dataset or item.client.dataset_path
        items[item.name] = {"sampling": item.client.sampling(),
                            "serve_argv": item.serve.argv(model=None, host=spec.get("server_host", ""),
                                                          port=spec.get("port", 0))}
    return dataset, items


def write_provenance(pf: Path, host: str, v: RunnerView, done: list[str],
                     probe: Callable[[str | None, str | None], ProvenanceRecord], **extra) -> None:
    """Write what the host's probe says (`probe(model, dataset)`: the WorkerProvenance fact, one round
    trip) to `pf`, with `extra` keys; a collect that finds nothing new touches nothing."""
    model, (dataset, items) = (v.state or {}).get("model_path"), spec_facts(v.spec)
    prov = json.dumps({"host": host, **asdict(probe(model, dataset)), "items_facts": items,
                       "plan_hash": (v.state or {}).get("plan_hash"), "items_done": done,
                       "runner_status": (v.state or {}).get("status"), **extra}, indent=2) + "\n"
    if not pf.is_file() or pf.read_text() != prov:
        bastion_io.atomic_write_text(pf, prov)


def bandwidth_given(value) -> dict:
    """The host's inventory gpu_memory_bandwidth_gbps for its provenance.json (layout.GIVEN_BANDWIDTH;
    nothing when the inventory sets none): kept per host, read back by provenance.given_bandwidths."""
    return {layout.GIVEN_BANDWIDTH: float(value)} if value else {}


def host_notes(results) -> dict[str, str]:
    """host -> why nothing came from it this time (for the report's missing cells), from the fleet's results."""
    notes = {}
    for r in results:
        if r.status in (Status.FAILED, Status.UNREACHABLE) and r.host not in notes:
            what = "unreachable" if r.status is Status.UNREACHABLE else "failed"
            first = r.message.strip().splitlines()[0][:300] if r.message.strip() else "no message"
            notes[r.host] = f"{r.host} {what} at collect: {first}"
    return notes
