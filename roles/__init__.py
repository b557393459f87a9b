"""Roles: what a host should look like, one module per role, found by this registry.

A role module declares one `ROLE = Role(...)`: its name, a one-line summary, the inventory
vars it reads, its steps and (optionally) its revert. `fab provision` (--only, --revert,
--help), the CLI reference (scripts/gen-cli-reference) and `fab bench`'s placement of the
runner files read the registry, so adding a role is adding a module (docs/dev/add-a-role.md).

Roles are found in this package (every module with a ROLE) and in the entry point group
`specfleet.roles` of installed distributions (a role shipped by another package).
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from specfleet.fleet import Outcomes
from specfleet.inventory import Host, InventoryError, Vars
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
    # inventory vars the role reads whose types specfleet.inventory.Vars declares (checked at load)
    reads: tuple[str, ...] = ()
    # the role's own vars (a pydantic model): validated for every selected host before any work
    vars: type[BaseModel] | None = None
    needs: frozenset[str] = frozenset()
    order: int = 100                       # provision runs roles by (order, name)
    bastion: Callable[[Context], None] | None = None        # runs on the bastion before the play
    after: Callable[[Context, Outcomes], None] | None = None  # (ctx, each host's outcome) after the play

    def __post_init__(self):
        unknown = set(self.needs) - NEEDS
        if unknown:
            raise ValueError(f"role {self.name!r}: needs {sorted(unknown)} (known: {sorted(NEEDS)})")
        typed = set(Vars.model_fields)
        own = set(self.vars.model_fields) if self.vars else set()
        untyped = [v for v in self.reads if v not in typed]
        if untyped:
            raise ValueError(f"role {self.name!r}: reads {untyped}, which specfleet.inventory.Vars does not type "
                             "(declare them in the role's own `vars` model)")
        if own & typed:
            raise ValueError(f"role {self.name!r}: its vars {sorted(own & typed)} are already typed in "
                             "specfleet.inventory.Vars (one name, one type)")

    @property
    def var_names(self) -> list[str]:
        return sorted(set(self.reads) | set(self.vars.model_fields if self.vars else ()))

    def check(self, host: Host, where: str) -> None:
        """The role's own vars on this host, validated: one line naming file, host and field."""
        if not self.vars:
            return
        mine = {k: v for k, v in host.vars.items() if k in self.vars.model_fields}
        try:
            self.vars.model_validate(mine)
        except ValidationError as e:
            err = e.errors()[0]
            fld = ".".join(str(p) for p in err["loc"])
            raise InventoryError(f"{where}: host {host.name!r}, field {fld!r} (role {self.name}): {err['msg']}") from None


def _package_modules() -> list[str]:
    return [f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]


def discover() -> dict[str, Role]:
    """Every role, in the order provision runs them; a module without ROLE is a helper, not a role."""
    found: list[Role] = []
    for modname in _package_modules():
        role = getattr(importlib.import_module(modname), "ROLE", None)
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


_registry: dict[str, Role] | None = None


def registry() -> dict[str, Role]:
    global _registry
    if _registry is None:
        _registry = discover()
    return _registry


def get(name: str) -> Role:
    return registry()[name]


def names() -> list[str]:
    return list(registry())


def revertible() -> list[str]:
    return [n for n, r in registry().items() if r.revert]
