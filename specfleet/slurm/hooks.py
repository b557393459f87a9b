"""The small hooks the fleet tasks call: under `scheduler: {kind: slurm}` a task runs here instead of
fanning out over SSH (tasks/bench.py, tasks/collect.py). None = not a Slurm inventory: the SSH path."""
from __future__ import annotations

from invoke.exceptions import Exit

from ..console import Reporter
from ..inventory import load_inventory


def slurm_inventory(inventory, vars_model):
    """The inventory (its vars checked against `vars_model`, specfleet.roles.vars_model() from the
    tasks) when its scheduler is Slurm; None otherwise."""
    inv = load_inventory(inventory, vars_model=vars_model)
    return inv if inv.slurm else None


def chosen_hosts(inv, hosts: str | None):
    """--hosts, or the `workers` group (every host when the inventory has none): where a fleet task runs
    (tasks/common.py: fleet_run), over SSH or under Slurm."""
    return inv.select(hosts or ("workers" if "workers" in inv.groups else None))


def on_slurm(task: str, inventory, hosts, plan, vars_model, **kw):
    """Run `task` (bench, status, stop) under Slurm if the inventory says so; None otherwise."""
    inv = slurm_inventory(inventory, vars_model)
    if inv is None:
        return None
    from . import dispatch
    chosen = chosen_hosts(inv, hosts)
    console = Reporter(verbose=False).console
    if task == "bench":
        code = dispatch.bench(plan, inv, chosen, console=console, **kw)
    elif task == "status":
        code = dispatch.status(plan, inv, chosen, console)
    else:
        code = dispatch.stop(plan, inv, console)
    if code:
        raise Exit(code=code)
    return code
