"""`fab provision` and `fab stage-model`: everything a worker needs before a benchmark."""
from __future__ import annotations

from invoke import task

from specfleet.roles import Context, model, registry, revertible, vars_model
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
    if _on_slurm(inventory, hosts, only, revert):
        return  # the inventory's scheduler is Slurm: the site's nodes checked in a job, nothing changed
    with fleet_run("provision", inventory=inventory, hosts=hosts, check=check, diff=diff, forks=forks,
                   serial=serial, accept_new_host_keys=accept_new_host_keys, verbose=verbose) as (fleet, inv, rep):
        ctx = Context(inventory=inv, fleet=fleet, console=rep.console, check=check,
                      options={"remove_dup_ip": remove_dup_ip})
        if undo:
            apply.revert(ctx, undo)
        else:
            apply.provision(ctx, roles)


def _on_slurm(inventory, hosts, only, revert) -> bool:
    """Under `scheduler: {kind: slurm}`: the site roles and the venv checked as a job step on every node
    (specfleet/slurm/site_check.py); False: not a Slurm inventory."""
    from invoke.exceptions import Exit

    from specfleet.console import Reporter
    from specfleet.errors import UserError
    from specfleet.slurm.hooks import chosen_hosts, slurm_inventory
    inv = slurm_inventory(inventory, vars_model())
    if inv is None:
        return False
    if only or revert:
        raise UserError(f"{inv.path}: field 'scheduler': under Slurm fab provision only checks what the site owns "
                        "(--only and --revert change nodes; run them over SSH, without the scheduler block)")
    from specfleet.slurm import site_check
    ctx = Context(inventory=inv, check=True)
    code = site_check.provision(inv, chosen_hosts(inv, hosts), lambda h: [
        s for name in site_check.SITE_ROLES for s in registry()[name].steps(h, ctx)], Reporter(verbose=False).console)
    if code:
        raise Exit(code=code)
    return True


@task(help=fleet_help(forks="how many hosts copy at once (default 8: the share's bandwidth is shared)"))
def stage_model(c, inventory=None, hosts=None, check=False, diff=False, forks=8, serial=False,
                accept_new_host_keys=False, verbose=False):
    """Copy the model from the NFS share to each worker's local disk (resumable; cuts 10-minute loads)."""
    with fleet_run("stage-model", inventory=inventory, hosts=hosts, check=check, diff=diff, forks=forks,
                   serial=serial, accept_new_host_keys=accept_new_host_keys, verbose=verbose) as (fleet, inv, rep):
        fleet.play(apply.guarded(model.stage_steps))
