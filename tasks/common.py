"""What every fleet task shares: its options, loading the inventory, the run and the recap.

Errors end a task in one of three ways, each decided here: bad input (a UserError, anywhere in a
task) is one line on stderr and exit 1; Ctrl-C says where each host stands and exits 130; anything
else is a bug: exit 70, one line, and the traceback in the event log. The event log's last record
says which, with the exit code the shell sees.
"""
from __future__ import annotations

import contextlib
import functools
import os
import shlex
import sys
import traceback
from typing import Iterator

from invoke.exceptions import Exit, UnexpectedExit

from specfleet.console import Reporter
from specfleet.errors import UserError, one_line
from specfleet.events import EventLog, Redactor
from specfleet.exits import EXIT_BAD_INPUT, EXIT_CRASHED, EXIT_INTERRUPTED
from specfleet.fleet import Fleet
from specfleet.inventory import DEFAULT_INVENTORY, INVENTORY_ENV, Inventory, load_inventory
from specfleet.roles import vars_model

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
    """The inventory, every var checked against its declared type and defaulted (the roles' registry)."""
    return load_inventory(inventory, vars_model=vars_model())  # an InventoryError is a UserError: `guarded` words it


def chosen_hosts(inv: Inventory, hosts: str | None):
    """--hosts, or the `workers` group (every host when the inventory has none): where a fleet task runs,
    whatever its backend."""
    return inv.select(hosts or ("workers" if "workers" in inv.groups else None))


def without(inv: Inventory, chosen: list, exclude: str, hosts: str | None) -> list:
    """The chosen hosts less those `--exclude` names (host or group names, as --hosts takes them)."""
    try:  # the one line names the flag that gave the unknown name
        drop = {h.name for h in inv.select(exclude)}
    except UserError as e:
        raise UserError(one_line(e).replace("--hosts names", "--exclude names", 1)) from None
    keep = [h for h in chosen if h.name not in drop]
    if not keep:
        raise UserError(f"{inv.path}: --exclude {exclude} leaves no host of {hosts or 'the workers'} to run on")
    return keep


def command_line() -> str:
    """The fab command as it was typed (to say what to run again)."""
    return shlex.join(["fab", *sys.argv[1:]])


def guarded(task):
    """Run a task's body so that bad input is one line and exit 1, Ctrl-C exits 130, a crash 70.

    Applied to every task of the collection (tasks/__init__.py): the one place a UserError
    becomes what the person sees.
    """
    body = task.body

    @functools.wraps(body)
    def run(*args, **kwargs):
        try:
            return body(*args, **kwargs)
        except UserError as e:
            raise Exit(f"error: {one_line(e)}", code=EXIT_BAD_INPUT) from None
        except KeyboardInterrupt:  # outside a fleet run (which says more): nothing ran on a host yet
            raise Exit("interrupted", code=EXIT_INTERRUPTED) from None
        except (Exit, UnexpectedExit):  # invoke's own verdicts (a fleet run's crash is one already)
            raise
        except Exception as e:  # a bug before or after the fleet run: no event log, so the traceback here
            traceback.print_exc()
            raise Exit(f"error: specfleet crashed: {type(e).__name__}: {e}", code=EXIT_CRASHED) from None
    task.body = run
    return task


@contextlib.contextmanager
def fleet_run(task: str, *, inventory=None, hosts=None, check=False, diff=False, forks=32, serial=False,
              accept_new_host_keys=False, verbose=False, all_hosts: bool = False, exclude: str | None = None,
              recap: bool = True) -> Iterator[tuple[Fleet, Inventory, Reporter]]:
    """Open a fleet for a task (by default on the workers, `all_hosts`: on every host; less those `exclude`
    names); the inventory is loaded here, once per task. On the way out print the recap and exit with its
    code."""
    inv = load(inventory)
    selected = inv.select(hosts) if all_hosts else chosen_hosts(inv, hosts)
    if exclude:
        selected = without(inv, selected, exclude, hosts)
    if not selected:
        raise UserError(f"{inv.path}: no hosts selected")
    redact = Redactor(inv.secrets())
    events = EventLog(task, directory=os.environ.get("SPECFLEET_RUNS_DIR", "runs"), redact=redact)
    reporter = Reporter(verbose=verbose, diff=diff, check=check, redact=redact)
    fleet = Fleet(selected, check=check, diff=diff, forks=forks, serial=serial,
                  accept_new=accept_new_host_keys, events=events, redact=redact, on_result=reporter)
    if check:
        reporter.console.print("[bold]check mode[/]: nothing will be changed on any host")
    end: dict = {"outcome": "finished"}
    crash: Exit | None = None
    try:
        yield fleet, inv, reporter
    except KeyboardInterrupt:
        fleet.interrupt()
        end = {"outcome": "interrupted", "exit_code": EXIT_INTERRUPTED}
    except Exit as e:  # a task's own verdict (bad input found while running)
        end = {"outcome": "bad input" if e.code == EXIT_BAD_INPUT else "exited", "exit_code": e.code,
               "error": {"type": "Exit", "message": e.message or ""}}
        raise
    except UserError as e:
        end = {"outcome": "bad input", "exit_code": EXIT_BAD_INPUT,
               "error": {"type": type(e).__name__, "message": str(e)}}
        raise
    except Exception as e:
        end = {"outcome": "crashed", "exit_code": EXIT_CRASHED,
               "error": {"type": type(e).__name__, "message": str(e)},
               "traceback": "".join(traceback.format_exception(e))}
        line = " ".join(f"{type(e).__name__}: {e}".split())[:400]
        crash = Exit(f"error: specfleet crashed: {redact(line)} (the traceback is in {events.path})",
                     code=EXIT_CRASHED)
    finally:
        fleet.close()
        code = end.get("exit_code", fleet.exit_code())
        events.close({**end, "exit_code": code, "counts": fleet.counts()})
    if end["outcome"] == "interrupted":
        reporter.console.print("[bold yellow]interrupted[/] (Ctrl-C): where each host stands")
        for line in fleet.standing():
            reporter.console.print(f"  {line}", markup=False, soft_wrap=True)
        for line in fleet.interrupt_hints or [f"each step is idempotent: `{command_line()}` again finishes the work"]:
            reporter.console.print(line, markup=False, soft_wrap=True)
        reporter.console.print(f"[dim]event log: {events.path}[/]")
        raise Exit("interrupted", code=EXIT_INTERRUPTED)
    if recap or crash:
        reporter.recap(fleet.counts(), fleet.dropped, title=f"RECAP {task}", not_ready=fleet.not_ready)
        for w in fleet.warnings:
            reporter.console.print(f"[bold yellow]warning:[/] {w}")
    reporter.console.print(f"[dim]event log: {events.path}[/]")
    if crash:
        raise crash
    if code:
        raise Exit(code=code)
