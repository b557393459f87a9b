"""What the Slurm backend (specfleet/backend/slurm.py) writes and reads on the shared path (docs/slurm.md).

The bastion never opens SSH: it asks Slurm which nodes and GPUs there are (sinfo --json), splits the
plan over them (the same split as over SSH; the GPU count is the GRES Slurm allocates per node, not
nvidia-smi's list), writes the run specs, the runner files and the sbatch script on the shared path,
checks the job with `sbatch --test-only`, submits it and waits for it to start (pending deadline).
Results stay on the shared path, where `fab collect` reads them.
"""
from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

from ..campaign import Paths, build_run_spec
from ..facts.runner_state import RunnerView, parse_view, view_script
from ..campaign.spec import resumed, worker_zipapp
from ..campaign.schedule.split import NodeInfo
from ..worker import layout
from ..worker.runspec import RunSpec
from ..errors import UserError
from ..quoting import q
from ..bastion_io import BastionStorageError
from ..step import Status, StepFailed
from .. import untrusted_json
from . import cli
from ..scheduler import SlurmScheduler
from .script import (JOBS, RUNNER, SCRIPT, SPECS, TOKEN, VERDICT, Job, campaign_dir, node_work_dir, render_script,
                     site_check_dir, slurm_dir)


def write_atomic(path: str, text: str | bytes, mode: int = 0o644) -> None:
    """Atomically (the nodes read these files); the folder exists."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb" if isinstance(text, bytes) else "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def jobs(cfg: SlurmScheduler, campaign: str) -> list[dict]:
    return read_json(os.path.join(slurm_dir(cfg, campaign), JOBS)) or []


def last_job(cfg: SlurmScheduler, campaign: str) -> dict | None:
    js = jobs(cfg, campaign)
    return js[-1] if js else None


def slurm_nodes(cfg: SlurmScheduler, inv, hosts, plan) -> list[NodeInfo]:
    """NodeInfo per host from Slurm: the node must exist in the partition and be usable (not drained or
    down: named with its state, reason and the `--exclude` that runs without it); its GPUs are its
    `gpu` GRES."""
    known = cli.nodes(cfg)
    if not cli.partition_exists(cfg):
        parts = sorted({p for n in known.values() for p in n.partitions})
        raise UserError(f"{inv.path}: field 'scheduler.partition': Slurm has no partition {cfg.partition!r} "
                        f"(partitions: {', '.join(parts) or 'none'})")
    out = []
    for h in hosts:
        n = known.get(h.name)
        if n is None:
            raise UserError(f"{inv.path}: host {h.name!r}: no Slurm node of that name (sinfo lists "
                            f"{', '.join(sorted(known)) or 'none'}); the host name is the Slurm node name")
        if cfg.partition not in n.partitions:
            raise UserError(f"{inv.path}: host {h.name!r}: Slurm node {h.name} is not in partition "
                            f"{cfg.partition!r} (it is in {', '.join(n.partitions) or 'none'})")
        base = NodeInfo.from_vars(h.name, {k: v for k, v in h.vars.items() if k not in ("gpus", "gpu_groups")})
        gpus = tuple({"index": i, "name": "slurm gres gpu"} for i in range(n.gpus)) if n.gpus > 1 else ()
        out.append(dataclasses.replace(base, gpus=gpus, gpus_source=f"slurm (gres gpu:{n.gpus})",
                                       groups_source="none: Slurm allocates the GPUs"))
    if bad := [known[h.name] for h in hosts if known[h.name].unusable]:
        said = "; ".join(f"Slurm node {n.name} is {'+'.join(n.unusable)} (sinfo: state {n.state}, reason: "
                         f"{n.reason or 'none given'})" for n in bad)
        names = [n.name for n in bad]
        raise UserError(f"{inv.path}: host {bad[0].name!r}: {said}: Slurm allocates nothing there; "
                        f"{exclude_hint(plan, names)}, or run again once the site resumes "
                        f"{'it' if len(bad) == 1 else 'them'} "
                        f"(`scontrol update nodename={','.join(names)} state=resume`)")
    return out


class _HashedOnce:
    """The plan with its hash computed once: every bench argv carries plan_hash, and hashing a plan of
    hundreds of configurations per argv made placing 256 nodes take 20 s. The plan does not change here."""

    def __init__(self, plan):
        self._plan, self._hash = plan, plan.plan_hash()

    def plan_hash(self) -> str:
        return self._hash

    def __getattr__(self, name):  # read once, then an attribute of this wrapper
        value = getattr(self._plan, name)
        setattr(self, name, value)
        return value


def place(cfg: SlurmScheduler, plan, hosts, queues, nodes: list[NodeInfo]) -> tuple[Job, dict[str, RunSpec]]:
    """Write everything the job needs on the shared path; returns the job and each node's run spec.

    One file, slurm/specs.json, holds every node's run spec and provenance probe: no folder and no
    file per node (creating 3 x 256 folders took 0.7 s of CPU on the testbed's loaded ext4, 256 files
    up to 0.9 s; more on NFS). Each node's step creates its own run folder and places its spec there
    (`runner.pyz slurm-step run`, worker/slurm_step.py); a node reads the whole file (about 6 KB per node)."""
    plan = _HashedOnce(plan)
    d = slurm_dir(cfg, plan.campaign)
    place_programs(d)
    dataset = plan.benchmark.on_worker
    if not dataset:
        src = plan.dataset_file()
        dataset = os.path.join(d, "datasets", Path(src).name)
        os.makedirs(os.path.dirname(dataset), exist_ok=True)
        shutil.copyfile(src, dataset)
    specs, placed = {}, {}
    from ..facts.worker_provenance import WorkerProvenance
    by_name = {n.name: n for n in nodes}
    ran = set(_listdir(campaign_dir(cfg, plan.campaign)))  # nodes with a run folder: one listing, not 256 opens
    for h in hosts:
        node = by_name[h.name]
        wd = node_work_dir(cfg, plan.campaign, h.name)
        paths = Paths(venv=h.require("venv_path"), work_dir=wd, dataset=dataset)
        spec = build_run_spec(plan, h.name, queues.queues[h.name], paths, env_file=h.var("env_file"),
                              gpus=list(node.gpus), gpu_groups=node.gpu_groups)
        rdir = layout.run_dir(wd, plan.campaign, h.name)
        # the spec the node last ran (its step placed it in its run folder): same queue, same run_id
        specs[h.name] = resumed(spec, read_json(os.path.join(rdir, layout.RUN_SPEC)) if h.name in ran else None, None)
        # with the provenance probe the node runs after its queue (collect has no SSH under Slurm)
        placed[h.name] = {"run_spec": specs[h.name].to_json(),
                          "provenance_probe": WorkerProvenance(paths.venv, rdir, None, dataset).command() + "\n"}
    # compact: json's C encoder (the node writes its run.json as dump_run_spec does)
    write_atomic(os.path.join(d, SPECS), json.dumps(placed, sort_keys=True))
    gpn = min((len(n.gpus) or 1) for n in nodes) if any(n.gpus for n in nodes) else _gpus_of(cfg, nodes)
    job = Job(plan.campaign, tuple(h.name for h in hosts), gpn, secrets.token_hex(16))
    write_atomic(os.path.join(d, TOKEN), job.token + "\n")
    write_atomic(os.path.join(d, SCRIPT), render_script(cfg, job), 0o755)
    return job, specs


def place_programs(d: str) -> None:
    """The worker program (runner.pyz, as over SSH) under <d>/bin: every job step runs it (`slurm-step`)."""
    os.makedirs(os.path.join(d, "bin"), exist_ok=True)
    write_atomic(os.path.join(d, "bin", RUNNER), worker_zipapp())


def _gpus_of(cfg, nodes) -> int:
    known = cli.nodes(cfg)
    return min(known[n.name].gpus for n in nodes)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def read_json(path: str):
    """A file on the shared path (nodes write there too): None when absent, not JSON or out of bounds."""
    try:
        with open(path, encoding="utf-8") as f:
            return untrusted_json.loads(f.read())
    except (OSError, ValueError):  # UnicodeDecodeError and UntrustedJSON are ValueErrors
        return None


def check_account(inv, cfg: SlurmScheduler, console) -> None:
    """An account Slurm's accounting does not list is bad input (one line); without accounting Slurm
    takes any account name and records it, and specfleet says it cannot check it."""
    if not cfg.account:
        return
    listed = cli.account_listed(cfg)
    if listed is False:
        raise UserError(f"{inv.path}: field 'scheduler.account': Slurm's accounting has no account {cfg.account!r} "
                        f"(`sacctmgr show account` lists the ones there are)")
    if listed is None:
        console.print(f"note: {inv.path}: field 'scheduler.account' ({cfg.account!r}) is not checked: this cluster "
                      "has no accounting (sacctmgr has no slurmdbd to ask), and Slurm then accepts any account "
                      "name and records it on the job", markup=False, soft_wrap=True)


def without_failed_site_check(inv, cfg: SlurmScheduler, plan, hosts, console) -> list:
    """The hosts less those the last `fab provision` (site_check.py) found wrong, each said in one line."""
    verdict = read_json(os.path.join(site_check_dir(cfg), VERDICT))  # None: no site check yet
    failed = verdict.get("failed") if isinstance(verdict, dict) else None  # node -> why
    if not isinstance(failed, dict):  # absent, or a file site_check.py did not write
        failed = {}
    out = [h for h in hosts if h.name not in failed]
    for h in hosts:
        if h.name in failed:
            console.print(f"node {h.name} left out: it failed the site check of `fab provision` ({failed[h.name]}); "
                          "`fab provision` again once the site has fixed it", markup=False, soft_wrap=True)
    if not out:
        raise UserError(f"{inv.path}: every chosen node failed the site check of `fab provision` "
                        f"({', '.join(sorted(failed))}): nothing to run on")
    return out


def wait_started(cfg: SlurmScheduler, inv, plan, job_id: str, job: Job, console) -> None:
    """Until every node has passed the check step (or the job ended, or the pending deadline passed)."""
    d = slurm_dir(cfg, plan.campaign)
    deadline = time.monotonic() + cfg.pending_timeout_s
    while True:
        j = cli.job(cfg, job_id)
        seen = {n: read_json(os.path.join(d, "nodes", f"{n}.json")) for n in job.nodes}
        ok = [n for n, r in seen.items() if r and str(r.get("job_id")) == str(job_id)]
        if len(ok) == len(job.nodes):
            console.print(f"job {job_id} running on {','.join(ok)}: GPUs " + "; ".join(
                f"{n} {','.join(map(str, seen[n].get('gpus') or [])) or 'none'}" for n in ok), markup=False)
            return
        state = cli.job_state(j)
        if not cli.is_active(j):
            missing = [n for n in job.nodes if n not in ok]
            raise UserError(f"{inv.path}: field 'scheduler.shared_dir': {cfg.shared_dir} is not shared: node(s) "
                            f"{', '.join(missing)} did not see the token the bastion wrote there (job {job_id} "
                            f"{state}; its output: {d}/slurm-{job_id}.out on the batch node)"
                            + (f"; or {exclude_hint(plan, missing)}" if ok else "")
                            if state in ("FAILED", "COMPLETED") and "PENDING" not in state else
                            f"Slurm job {job_id} ended {state} before it started its steps "
                            f"({(j or {}).get('state_reason') or 'no reason given'})")
        cli.cancel_if_pending_past(inv, cfg, job_id, j, deadline, "Slurm job",
                                   "cancelled, nothing ran; free the nodes or raise the deadline")
        time.sleep(0.5)


def view(cfg: SlurmScheduler, plan, host: str, alive: bool) -> RunnerView:
    """A node's campaign read on the shared path (the same script as over SSH, run on the bastion)."""
    wd = node_work_dir(cfg, plan.campaign, host)
    p = subprocess.run(["/bin/sh", "-c", view_script(wd, plan.campaign, host)], capture_output=True, text=True,
                       timeout=30)
    v = parse_view(p.stdout)
    v.alive = alive
    v.runner_pid = v.runner_pid if alive else None
    return v


def failed_nodes(cfg: SlurmScheduler, plan, hosts) -> dict[str, str]:
    """Slurm node name -> why its queue did not finish (its state.json on the shared path)."""
    out = {}
    for h in hosts:
        v = view(cfg, plan, h.name, False)
        st = v.state
        if st is None:  # no state.json, or one refused (named)
            out[h.name] = ("; ".join(v.problems)
                           or "its runner never started (the job's output, slurm-<job>.out, says why)")
        elif st.get("status") != "done":
            bad = next((i for i in st.get("items", []) if i.get("status") == "failed"), None)
            out[h.name] = (f"runner {st.get('status')}" +
                           (f", {bad['name']}: {bad.get('error') or 'no error recorded'}" if bad else ""))
    return out


def exclude_hint(plan, nodes: list[str]) -> str:
    """The command that runs the campaign again without `nodes` (done cells of the others are kept)."""
    return (f"re-run without {'it' if len(nodes) == 1 else 'them'}: "
            f"fab bench --plan {q(str(plan.file))} --exclude {','.join(nodes)}")


def collect(fleet, inv, plan, dest: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Each host's finished items from the shared path (no SSH), then provenance with the job ids.
    Returns the result files refused per host and notes for the report (the Slurm job(s) of the campaign)."""
    from ..facts.worker_provenance import WorkerProvenance
    from ..collect.fetch import bandwidth_given, take_finished
    cfg = inv.slurm
    recs = jobs(cfg, plan.campaign)
    refused = {}
    for h in fleet.hosts:
        try:
            v = view(cfg, plan, h.name, False)
            if not v.state and not v.done_markers:
                fleet.record_local_for(h.name, "fetch results", Status.OK, "no campaign results on this node yet")
                continue
            src = layout.run_dir(node_work_dir(cfg, plan.campaign, h.name), plan.campaign, h.name)
            eff = read_json(os.path.join(src, "run.slurm.json")) or {}
            # the shared path is written by the nodes: untrusted as a worker is (collect/untrusted.py)
            got = take_finished(
                h.name, plan, dest, v, src, _sh, f"{src}/", None,
                # the node ran the command after its queue, without the model (not known before it):
                # parsed with it, as over SSH
                lambda model, dataset: WorkerProvenance(h.var("venv_path") or "", src, model, dataset).parse(
                    _read_text(Path(src, "provenance.probe")), 0),
                slurm={**(eff.get("slurm") or {}), "jobs": [r["job_id"] for r in recs if h.name in r.get("nodes", [])]},
                **bandwidth_given(h.var("gpu_memory_bandwidth_gbps")))
            refused[h.name] = got.refused
            fleet.record_local_for(h.name, "fetch results", got.status, got.message)
        except BastionStorageError:
            raise  # the bastion's own disk, not this node: the task's one line and exit code
        except (UserError, OSError, StepFailed) as e:
            fleet.record_local_for(h.name, "fetch results", Status.FAILED, str(e))
    if not recs:
        return refused, []
    states = {r["job_id"]: cli.job_state(cli.job(cfg, r["job_id"])) for r in recs[-3:]}
    return refused, ["Slurm job(s) of this campaign: " + "; ".join(
        f"{r['job_id']} on {','.join(r['nodes'])} ({states.get(r['job_id'], 'earlier')})" for r in recs)]


def _sh(script: str) -> str:
    """A script's output, run on the bastion (the shared path is mounted here, as on the nodes)."""
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True).stdout


def _read_text(path: Path) -> str:
    """A file's text, or "" when it is not there (a node's probe output before its queue ended)."""
    try:
        return path.read_text()
    except OSError:
        return ""
