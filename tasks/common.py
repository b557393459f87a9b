"""What every fleet task shares: its options, loading the inventory, the run and the recap."""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

from invoke.exceptions import Exit

from specfleet.console import Reporter
from specfleet.events import EventLog, Redactor
from specfleet.fleet import EXIT_BAD_INPUT, Fleet
from specfleet.inventory import DEFAULT_INVENTORY, INVENTORY_ENV, Inventory, InventoryError, load_inventory

FLEET_HELP = {
    "inventory": f"inventory file (default: ${INVENTORY_ENV}, else {DEFAULT_INVENTORY})",
    "hosts": "comma list of host and group names (default: the 'workers' group if the inventory has one, else all hosts; facts: all hosts)",
    "check": "report what would change; change nothing on any host",
    "diff": "show file and route differences",
    "forks": "how many hosts to work on at once (default 32)",
    "serial": "one host at a time (same as --forks 1)",
    "accept_new_host_keys": "record host keys not yet in known_hosts (a changed key is still refused)",
    "verbose": "also print steps that changed nothing, with timings",
}


def fleet_help(*, changes: bool = True, **extra: str) -> dict[str, str]:
    """Help for the shared options; `changes=False` for read-only tasks (no --check/--diff)."""
    shared = {k: v for k, v in FLEET_HELP.items() if changes or k not in ("check", "diff")}
    return {**shared, **extra}


def load(inventory: str | None) -> Inventory:
    try:
        return load_inventory(inventory)
    except InventoryError as e:
        raise Exit(f"error: {e}", code=EXIT_BAD_INPUT) from None


@contextlib.contextmanager
def fleet_run(task: str, *, inventory=None, hosts=None, check=False, diff=False, forks=32, serial=False,
              accept_new_host_keys=False, verbose=False, default_hosts: str | None = None,
              recap: bool = True) -> Iterator[tuple[Fleet, Inventory, Reporter]]:
    """Open a fleet for a task; on the way out print the recap and exit with its code."""
    inv = load(inventory)
    if default_hosts and default_hosts not in inv.groups:
        default_hosts = None  # an inventory without that group: every host
    try:
        selected = inv.select(hosts or default_hosts)
    except InventoryError as e:
        raise Exit(f"error: {e}", code=EXIT_BAD_INPUT) from None
    if not selected:
        raise Exit(f"error: {inv.path}: no hosts selected", code=EXIT_BAD_INPUT)
    redact = Redactor(inv.secrets())
    events = EventLog(task, directory=os.environ.get("SPECFLEET_RUNS_DIR", "runs"), redact=redact)
    reporter = Reporter(verbose=verbose, diff=diff, check=check, redact=redact)
    fleet = Fleet(selected, check=check, diff=diff, forks=forks, serial=serial,
                  accept_new=accept_new_host_keys, events=events, redact=redact, on_result=reporter)
    if check:
        reporter.console.print("[bold]check mode[/]: nothing will be changed on any host")
    try:
        yield fleet, inv, reporter
    finally:
        fleet.close()
        code = fleet.exit_code()
        events.close({"exit_code": code, "counts": fleet.counts()})
    if recap:
        reporter.recap(fleet.counts(), fleet.dropped, title=f"RECAP {task}")
        for w in fleet.warnings:
            reporter.console.print(f"[bold yellow]warning:[/] {w}")
    reporter.console.print(f"[dim]event log: {events.path}[/]")
    if code:
        raise Exit(code=code)
