"""Applying the registry's roles to a fleet: what `fab provision` does between parsing and the recap.

Order of a play: bad input stops everything before any host is touched (the roles' own vars,
the datasets); then the bastion hooks (the venv build); then one batched play of every chosen
role's steps per host; then the roles' `after` hooks (tables, warnings) on the results.
"""
from __future__ import annotations

import os
from pathlib import Path

from specfleet.errors import UserError
from specfleet.fleet import Outcomes
from specfleet.step import Status, StepFailed
from specfleet.steps.command import Assert

from . import Context, PlayVars, Role, registry, revertible


def select(only: str | None) -> list[Role]:
    """The roles a comma list names, in the registry's order (all when none is named)."""
    reg = registry()
    if not only:
        return list(reg.values())
    chosen = [r.strip() for r in only.split(",") if r.strip()]
    bad = [r for r in chosen if r not in reg]
    if bad:
        raise UserError(f"--only names unknown role(s) {', '.join(bad)} (roles: {', '.join(reg)})")
    return [r for n, r in reg.items() if n in chosen]


def revert_role(name: str) -> Role:
    role = registry().get(name)
    if not role or not role.revert:
        raise UserError(f"--revert takes one of {', '.join(revertible())}")
    return role


def datasets(inv) -> list[Path]:
    """The inventory's `datasets`: bastion files, a relative path relative to the inventory file."""
    out = []
    for i, name in enumerate(PlayVars.from_vars(inv.bastion_vars, inv.path, "bastion").datasets or []):
        path = Path(os.path.expanduser(str(name)))
        path = path if path.is_absolute() else inv.path.parent / path
        if not path.is_file() or not os.access(path, os.R_OK):
            raise UserError(f"{inv.path}: bastion, field 'datasets' (entry {i + 1}): {os.path.abspath(path)} is not a "
                            "readable file on the bastion (a relative path is relative to the inventory file)")
        out.append(path)
    return out


def skipped(host, ctx: Context, roles: list[Role]) -> list[str]:
    """The chosen roles this host's `skip_roles` names; an unknown name is bad input (file, host, field)."""
    names = list(PlayVars.of(host).skip_roles or ())
    bad = [n for n in names if n not in registry()]
    if bad:
        raise UserError(f"{ctx.inventory.path}: host {host.name!r}, field 'skip_roles': unknown role(s) "
                        f"{', '.join(bad)} (roles: {', '.join(registry())})")
    return [r.name for r in roles if r.name in names]


def guarded(steps_for):
    """A host whose inventory lacks a var a role needs fails alone, with the var's name."""
    def inner(host):
        try:
            return steps_for(host)
        except (KeyError, StepFailed) as e:
            return [Assert("inventory vars", "false", str(e).strip("'\""))]
    return inner


def provision(ctx: Context, roles: list[Role]) -> Outcomes:
    """Run the chosen roles on ctx.fleet; returns each host's outcome of the play."""
    fleet = ctx.fleet
    # bad input stops before any work (each var's type: checked at load)
    skips = {host.name: skipped(host, ctx, roles) for host in fleet.hosts}
    if any("datasets" in r.needs for r in roles):
        ctx.datasets = datasets(ctx.inventory)
    for role in roles:
        if role.bastion:
            role.bastion(ctx)
    if any("manifest" in r.needs for r in roles) and not ctx.manifest_tried:
        from .venv import bastion_manifest
        bastion_manifest(ctx, build=False)
    ready = [r for r in roles if "manifest" not in r.needs or ctx.manifest]
    for host, names in skips.items():  # roles the inventory skips on a host: in the recap, never silent
        for name in names:
            fleet.record_local_for(host, name, Status.SKIPPED, "skipped by the inventory (skip_roles)")
            ctx.console.print(f"[cyan]{'skipped':>12}[/] [bold]{host}[/]  role {name} (inventory skip_roles)")
    results = fleet.play(guarded(lambda host: [s for r in ready if r.name not in skips[host.name]
                                               for s in r.steps(host, ctx)]))
    for role in roles:
        if role.after:
            role.after(ctx, results)
    return results


def revert(ctx: Context, role: Role) -> Outcomes:
    return ctx.fleet.play(guarded(lambda h: role.revert(h, ctx)))
