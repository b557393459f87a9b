"""`fab provision` under `scheduler: {kind: slurm}`: the site's nodes are checked, never changed (docs/slurm.md).

A site owns its nodes' drivers and mounts, and its image holds the venv: specfleet does not change
them. The site roles (SITE_ROLES: the GPU modules, the storage route and the model share) and the
venv's presence are checked in check mode as the first job step on every node: the bastion batches
each node's fact probes into one script (the same batch it sends over SSH, specfleet.facts.gather),
a job runs them on every node (`runner.pyz slurm-step site-check`), each node leaves its output on the shared
path, and the bastion decides from it, in check mode. A node with anything to change, or a probe
that failed, is named by its Slurm node name with the `--exclude` hint, and recorded in
`<shared_dir>/provision/verdict.json`, which `fab bench` reads: it leaves that node out of the split
until `fab provision` passes it again.
"""
from __future__ import annotations

import json
import os
import secrets
import time

from ..errors import UserError
from ..facts.gather import gather
from ..scheduler import SlurmScheduler
from ..steps.command import Assert
from ..shell import q
from . import cli
from .dispatch import place_programs, read_json, write_atomic
from .script import SCRIPT, VERDICT, render_site_check, site_check_argv, site_check_dir

SITE_ROLES = ("nvidia", "nfs")   # what a site owns: drivers (modules) and mounts (route, fstab, share)


class _Batch(Exception):
    """gather's one round trip, caught: the batch script is what the node runs."""

    def __init__(self, script: str, root: bool):
        self.script, self.root = script, root


def _capture(script: str, root: bool) -> str:
    raise _Batch(script, root)


def venv_check(host) -> Assert:
    """The venv is on the node (a shared path, or the site's image): it is never copied there per node."""
    venv = host.require("venv_path")
    return Assert("venv on the node", f"test -x {q(venv + '/bin/python')}",
                  f"the venv {venv} is not on this node: put it on the shared path (venv_path) or in the site's image")


def batch_of(steps: list, token: str) -> tuple[str, bool] | None:
    """The one probe script (and whether it runs as root) for these steps, its markers carrying
    `token` (the bastion keeps it to read the output back); None: nothing to probe."""
    try:
        gather(steps, _capture, token=token)
    except _Batch as b:
        return b.script, b.root
    return None


def verdict(steps: list, stdout: str, token: str) -> list[str]:
    """Why a node fails the site check, from its probe output (check mode: a change is a failure)."""
    out = []
    for step, values in zip(steps, gather(steps, lambda script, root: stdout, token=token)):
        try:
            if isinstance(values, Exception):
                raise values
            changes = step.decide(values)
        except Exception as e:  # a probe or a check that failed: this node, this step
            out.append(f"{step.name}: {e}")
            continue
        if changes:
            out.append(f"{step.name}: would change ({'; '.join(c.summary for c in changes)}); the site owns it, "
                       "specfleet does not change it under Slurm")
    return out


def provision(inv, hosts, steps_for, console, poll: float = 0.5) -> dict[str, str]:
    """Check every host (`steps_for(host)`: the site roles' steps, backend/slurm.py) in one Slurm job;
    returns each node that failed, with why."""
    cfg: SlurmScheduler = inv.slurm
    d = site_check_dir(cfg)
    steps, scripts, failed = {}, {}, {}
    token = secrets.token_hex(6)  # the batches' marker token: stays on the bastion, which reads them back
    for h in hosts:
        try:
            steps[h.name] = [*steps_for(h), venv_check(h)]
            batch = batch_of(steps[h.name], token)
        except (KeyError, UserError) as e:  # a var this host lacks: it fails alone
            failed[h.name] = f"inventory: {str(e).strip(chr(39))}"
            continue
        scripts[h.name] = {"script": batch[0], "root": batch[1]} if batch else {"script": "", "root": False}
    todo = [h.name for h in hosts if h.name in scripts]
    job_id = None
    if todo:
        place_programs(d)
        os.makedirs(os.path.join(d, "out"), exist_ok=True)
        write_atomic(os.path.join(d, "scripts.json"), json.dumps(scripts))
        write_atomic(os.path.join(d, SCRIPT), render_site_check(cfg))
        try:
            job_id = cli.submit(cfg, site_check_argv(cfg, todo))
        except cli.SlurmError as e:
            raise cli.explain_refusal(inv, cfg, e) from None
        console.print(f"site check: Slurm job {job_id} on {','.join(todo)} (the roles {', '.join(SITE_ROLES)} and "
                      "the venv, in check mode: nothing on the nodes is changed)", markup=False, soft_wrap=True)
        _wait(inv, cfg, job_id, poll)
        for name in todo:
            got = read_json(os.path.join(d, "out", f"{name}.json")) or {}
            if str(got.get("job_id")) != str(job_id):
                failed[name] = (f"its check never reported (job {job_id} {cli.job_state(cli.job(cfg, job_id))}; "
                                f"{d}/slurm-{job_id}.out says why; is {cfg.shared_dir} shared?)")
                continue
            why = verdict(steps[name], got.get("stdout") or "", token)
            if why:
                failed[name] = "; ".join(why)
    for h in hosts:
        console.print(f"node {h.name}: " + (f"FAILED the site check: {failed[h.name]}" if h.name in failed else
                                            "ok (site check passed)"), markup=False, soft_wrap=True)
    os.makedirs(d, exist_ok=True)
    write_atomic(os.path.join(d, VERDICT), json.dumps({
        "job_id": job_id, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "checked": [h.name for h in hosts],
        "failed": failed}, indent=1))
    if failed:
        console.print(f"fab bench leaves {'it' if len(failed) == 1 else 'them'} out until `fab provision` passes "
                      f"{'it' if len(failed) == 1 else 'them'}; by hand: fab bench --plan P --exclude "
                      f"{','.join(sorted(failed))}", markup=False, soft_wrap=True)
    return failed


def _wait(inv, cfg: SlurmScheduler, job_id: str, poll: float) -> None:
    """Until the check job ends; a job still pending after pending_timeout_s is cancelled."""
    deadline = time.monotonic() + cfg.pending_timeout_s
    while cli.is_active(j := cli.job(cfg, job_id)):
        cli.cancel_if_pending_past(inv, cfg, job_id, j, deadline, "the site check's Slurm job",
                                   "cancelled, nothing checked")
        time.sleep(poll)
