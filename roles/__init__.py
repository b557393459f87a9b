"""Roles: what a host should look like, one module per role, found by this registry.

A role module declares one `ROLE = Role(...)`: its name, a one-line summary, its inventory vars
(a pydantic model: their types and defaults), the vars of others it reads, its steps and
(optionally) its revert. `vars_model()` puts every role's vars on top of the core's
(specfleet.inventory.CoreVars): the tasks load the inventory with it, so each var has one type and
one default, declared once, and every reader (role, task, core) sees the same value. `fab provision` (--only, --revert,
--help), the CLI reference (scripts/gen-cli-reference) and `fab bench`'s placement of the
runner files read the registry, so adding a role is adding a module (docs/dev/add-a-role.md).

Roles are found in this package (every module with a ROLE) and in the entry point group
`specfleet.roles` of installed distributions (a role shipped by another package).
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

from specfleet.fleet import Outcomes
from specfleet.inventory import CoreVars, Host, HostVars, Line, Word
from specfleet.step import Step

ENTRY_POINTS = "specfleet.roles"
# what a role may ask the bastion to prepare before any host is touched (specfleet.roles.apply)
NEEDS = frozenset({"manifest", "datasets"})


@dataclass
class Context:
    """What the bastion prepared for this play, handed to every role's steps."""

    inventory: Any = None                  # specfleet.inventory.Inventory
    fleet: Any = None                      # specfleet.fleet.Fleet (bastion and after hooks)
    console: Any = None                    # rich Console the hooks print to
    check: bool = False
    manifest: dict | None = None           # the bastion venv's manifest ("manifest" in needs)
    manifest_tried: bool = False           # a failed build leaves manifest None: roles needing it skip
    datasets: list[Path] = field(default_factory=list)  # bastion files to place ("datasets" in needs)
    options: dict[str, Any] = field(default_factory=dict)  # task options a role's `after` reads


StepsFn = Callable[[Host, Context], list[Step]]


@dataclass(frozen=True)
class Role:
    """One role. `steps`/`revert` are pure: host + context in, steps out (nothing runs here)."""

    name: str
    summary: str
    steps: StepsFn
    revert: StepsFn | None = None
    # the role's own inventory vars, typed, with their defaults (a HostVars model, see vars_model; the
    # role's steps read them as its attributes: `NfsVars.of(host).nfs_mount`)
    vars: type[BaseModel] | None = None
    # vars declared elsewhere (the core, provision, another role) that the role reads too
    reads: tuple[str, ...] = ()
    needs: frozenset[str] = frozenset()
    order: int = 100                       # provision runs roles by (order, name)
    bastion: Callable[[Context], None] | None = None        # runs on the bastion before the play
    after: Callable[[Context, Outcomes], None] | None = None  # (ctx, each host's outcome) after the play

    def __post_init__(self):
        unknown = set(self.needs) - NEEDS
        if unknown:
            raise ValueError(f"role {self.name!r}: needs {sorted(unknown)} (known: {sorted(NEEDS)})")

    @property
    def var_names(self) -> list[str]:
        return sorted(set(self.reads) | set(self.vars.model_fields if self.vars else ()))


class PlayVars(HostVars):
    """The vars provisioning itself reads (specfleet.roles.apply)."""

    skip_roles: list[Word] | None = None  # roles this host does not run (e.g. nfs without a storage NIC)
    datasets: list[Line] | None = None    # bastion files the configs role places on every worker


def assemble(roles: list[Role]) -> type[BaseModel]:
    """The type of every inventory var: the core's, provision's and each role's, each declared once.
    Validated strictly, unknown names pass (the user's own vars)."""
    owner = {n: "specfleet.inventory.CoreVars" for n in CoreVars.model_fields}
    owner |= {n: "specfleet.roles.PlayVars" for n in PlayVars.model_fields}
    models = []
    for role in roles:
        for name in role.vars.model_fields if role.vars else ():
            if name in owner:
                raise ValueError(f"role {role.name!r}: var {name!r} is already declared by {owner[name]} "
                                 "(one name, one type, one default: read it with `reads`)")
            owner[name] = f"role {role.name}"
        models += [role.vars] if role.vars else []
    for role in roles:
        undeclared = [v for v in role.reads if v not in owner]
        if undeclared:
            raise ValueError(f"role {role.name!r}: reads {undeclared}, which nothing declares "
                             "(declare them in the role's `vars` model)")
    return type("Vars", (CoreVars, PlayVars, *models),
                {"__module__": __name__, "model_config": ConfigDict(extra="allow", strict=True)})


def discover() -> dict[str, Role]:
    """Every role, in the order provision runs them; a module without ROLE is a helper, not a role."""
    found: list[Role] = []
    for m in pkgutil.iter_modules(__path__):
        if m.name.startswith("_"):
            continue
        role = getattr(importlib.import_module(f"{__name__}.{m.name}"), "ROLE", None)
        if isinstance(role, Role):
            found.append(role)
    for ep in entry_points(group=ENTRY_POINTS):
        role = ep.load()
        if not isinstance(role, Role):
            raise TypeError(f"entry point {ep.name} = {ep.value} ({ENTRY_POINTS}) is not a specfleet Role")
        found.append(role)
    out: dict[str, Role] = {}
    for role in sorted(found, key=lambda r: (r.order, r.name)):
        if role.name in out:
            raise ValueError(f"two roles are called {role.name!r}")
        out[role.name] = role
    return out


@functools.cache
def registry() -> dict[str, Role]:
    return discover()


@functools.cache
def vars_model() -> type[BaseModel]:
    """Every inventory var's type and default (`assemble` of the registry): what the tasks load with."""
    return assemble(list(registry().values()))


def get(name: str) -> Role:
    return registry()[name]


def revertible() -> list[str]:
    return [n for n, r in registry().items() if r.revert]
