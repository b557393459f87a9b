"""The sbatch submission of a campaign: its options (argv, never a shell) and its script, rendered pure.

One job per campaign: `--nodes N --nodelist <the split's nodes> --ntasks-per-node 1 --gpus-per-node G`.
The script runs two job steps on every node (`runner.pyz slurm-step`, specfleet/worker/slurm_step.py): `check` (the shared path is shared,
the allocation recorded) and `run` (the node's queue, baseline first, under the runner). Every value
from the inventory or the plan reaches the script through specfleet.quoting (`q`, `join`); sbatch's
options go as argv words, so no option value is ever parsed by a shell, and the script keeps them as
a quoted comment line (the kept copy says exactly how the job was submitted).

Layout on the shared path (`campaign_dir`):
    <shared_dir>/<campaign>/slurm/         job.sbatch, jobs.json, token, specs.json, nodes/<node>.json, bin/,
                                           slurm-<jobid>.out
    <shared_dir>/<campaign>/<node>/        the node's work_dir: <campaign>/<node>/ is its run folder
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass

from ..quoting import join, q
from ..scheduler import SlurmScheduler

SCRIPT = "job.sbatch"
JOBS = "jobs.json"
TOKEN = "token"
SPECS = "specs.json"  # {node: {run_spec, provenance_probe}}: what the bastion placed for each node
RUNNER = "runner.pyz"  # the worker program, in <slurm_dir>/bin: its `slurm-step` is each job step (worker/slurm_step.py)


def campaign_dir(cfg: SlurmScheduler, campaign: str) -> str:
    return posixpath.join(cfg.shared_dir, campaign)


def slurm_dir(cfg: SlurmScheduler, campaign: str) -> str:
    return posixpath.join(campaign_dir(cfg, campaign), "slurm")


def node_work_dir(cfg: SlurmScheduler, campaign: str, node: str) -> str:
    """A node's work_dir on the shared path: its own, so each node's runner lock is its own."""
    return posixpath.join(campaign_dir(cfg, campaign), node)


@dataclass(frozen=True)
class Job:
    """What one submission asks of Slurm."""

    campaign: str
    nodes: tuple[str, ...]   # Slurm node names, in the split's order
    gpus_per_node: int       # 0: no GPU GRES requested
    token: str               # written to <slurm_dir>/token by the bastion; every node must read it


def _common_argv(cfg: SlurmScheduler, name: str, nodes, d: str) -> list[str]:
    """What every job specfleet submits asks: one task per node, on the inventory's partition and account."""
    return ["sbatch", "--parsable", f"--job-name=specfleet-{name}", f"--nodes={len(nodes)}",
            f"--nodelist={','.join(nodes)}", "--ntasks-per-node=1", f"--partition={cfg.partition}",
            f"--time={cfg.time_limit}", f"--output={d}/slurm-%j.out", f"--chdir={d}",
            *([f"--account={cfg.account}"] if cfg.account else [])]


def sbatch_argv(cfg: SlurmScheduler, job: Job, *, test_only: bool = False) -> list[str]:
    """sbatch and its options as argv words (the script's path last)."""
    d = slurm_dir(cfg, job.campaign)
    argv = _common_argv(cfg, job.campaign, job.nodes, d)
    if job.gpus_per_node:
        argv.append(f"--gpus-per-node={job.gpus_per_node}")
    if cfg.stop_signal_s:
        argv.append(f"--signal=TERM@{cfg.stop_signal_s}")
    argv.append("--requeue" if cfg.requeue else "--no-requeue")
    argv += list(cfg.extra_args)
    if test_only:
        argv.append("--test-only")
    return argv + [posixpath.join(d, SCRIPT)]


def render_script(cfg: SlurmScheduler, job: Job) -> str:
    """The batch script (bash): both steps on every node; values quoted by specfleet.quoting."""
    d = slurm_dir(cfg, job.campaign)
    step = [cfg.python, "-S", posixpath.join(d, "bin", RUNNER), "slurm-step"]
    check = join([*step, "check", "--dir", d, "--token", job.token])
    run = join([*step, "run", "--dir", campaign_dir(cfg, job.campaign), "--campaign", job.campaign,
                "--python", cfg.python])
    # the run step reads run specs under campaign_dir; check reads the token under slurm_dir
    return "\n".join([
        "#!/bin/bash",
        f"# specfleet campaign {q(job.campaign)} on Slurm (docs/slurm.md); written by `fab bench`, kept beside",
        "# the results. Submitted with:",
        "#   " + join(sbatch_argv(cfg, job)),
        "set -u",
        'echo "specfleet: job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-?}, restart ${SLURM_RESTART_COUNT:-0}"',
        "# step 1, every node: the shared path is shared; record the allocation (nodes/<node>.json)",
        f"srun --ntasks-per-node=1 --kill-on-bad-exit=1 -- {check} || exit 3",
        "# step 2, every node: its queue (baseline first) under the runner; resumes finished cells",
        f"srun --ntasks-per-node=1 --kill-on-bad-exit=0 -- {run}",
        "",
    ])


# fab provision under Slurm (site_check.py): <shared_dir>/provision/ holds its job script, each node's
# probe batch (scripts.json), their outputs (out/<node>.json) and the verdict fab bench reads
SITE_CHECK = "provision"
VERDICT = "verdict.json"


def site_check_dir(cfg: SlurmScheduler) -> str:
    return posixpath.join(cfg.shared_dir, SITE_CHECK)


def site_check_argv(cfg: SlurmScheduler, nodes) -> list[str]:
    """The site check's job: no GPU asked (the probes read the node), never requeued."""
    d = site_check_dir(cfg)
    return [*_common_argv(cfg, "site-check", nodes, d), "--no-requeue", *cfg.extra_args,
            posixpath.join(d, SCRIPT)]


def render_site_check(cfg: SlurmScheduler) -> str:
    d = site_check_dir(cfg)
    step = join([cfg.python, "-S", posixpath.join(d, "bin", RUNNER), "slurm-step", "site-check", "--dir", d])
    return "\n".join([
        "#!/bin/bash",
        "# specfleet: fab provision under Slurm checks every node's site roles and venv, changes nothing",
        "set -u",
        f"srun --ntasks-per-node=1 --kill-on-bad-exit=0 -- {step}",
        "",
    ])
