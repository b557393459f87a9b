"""`fab provision` and `fab stage-model`: everything a worker needs before a benchmark."""
from __future__ import annotations

from invoke import task

from specfleet.roles import model, registry, revertible
from specfleet.roles import apply
from specfleet.tasks.common import fleet_help, fleet_run


@task(help=fleet_help(
    only=f"comma list of roles to run (default all: {', '.join(registry())})",
    revert=f"undo what one role did: {', '.join(revertible())}",
    remove_dup_ip="remove the duplicate addresses held by this host (live and in its netplan file)",
))
def provision(c, inventory=None, hosts=None, check=False, diff=False, only=None, revert=None, remove_dup_ip=None,
              forks=32, serial=False, accept_new_host_keys=False, verbose=False):
    """Build the venv on the bastion and make every worker ready: venv, env file, GPU, NFS, model, configs."""
    roles = apply.select(only)  # a role name that does not exist is refused before any inventory is read
    undo = apply.revert_role(revert) if revert else None
    with fleet_run("provision", inventory=inventory, hosts=hosts, check=check, diff=diff, forks=forks,
                   serial=serial, accept_new_host_keys=accept_new_host_keys, verbose=verbose) as (fleet, inv, rep):
        from specfleet.backend import Run, backend_for
        # over SSH the roles are applied; under Slurm the site's nodes are checked in a job, nothing changed
        backend_for(inv).provision(Run(fleet, inv, rep.console, check=check, verbose=verbose), roles, undo,
                                   partial=bool(only), options={"remove_dup_ip": remove_dup_ip})


@task(help=fleet_help(forks="how many hosts copy at once (default 8: the share's bandwidth is shared)"))
def stage_model(c, inventory=None, hosts=None, check=False, diff=False, forks=8, serial=False,
                accept_new_host_keys=False, verbose=False):
    """Copy the model from the NFS share to each worker's local disk (resumable; cuts 10-minute loads)."""
    with fleet_run("stage-model", inventory=inventory, hosts=hosts, check=check, diff=diff, forks=forks,
                   serial=serial, accept_new_host_keys=accept_new_host_keys, verbose=verbose) as (fleet, inv, rep):
        fleet.play(apply.guarded(model.stage_steps))
