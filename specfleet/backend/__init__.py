"""Where a campaign runs: one backend per inventory, chosen once (`backend_for`), after pyinfra's connectors.

The tasks (`fab bench`, `status`, `stop`, `collect`, `provision`) call these verbs and never ask which
backend they hold; a new place to run (a third backend) implements them beside the two here:

| verb | over SSH (`ssh.py`, the default) | under Slurm (`slurm.py`, `scheduler: {kind: slurm}`) |
|---|---|---|
| `place` | read each worker (GPUs, campaign state), split, the configs role's runner files, the run folder and run spec | sinfo, split, runner.pyz and every node's run spec on the shared path, `sbatch --test-only` |
| `start` | start (or reattach to) each runner, detached; with `wait`, follow them to the end | submit the job, wait for its steps; with `wait`, follow the job to the end |
| `view` | each worker's campaign, read over SSH | each node's campaign on the shared path, and the job's state |
| `stop` | SIGTERM each runner, wait for it | scancel the job, wait for it |
| `fetch` | rsync each worker's finished results (collect/fetch.py) | the same files, read from the shared path |
| `provision` | the roles, applied (or `--revert`) | the site roles and the venv, checked in a job, nothing changed |

Every verb records what it did per host in the run's fleet (its recap and exit code), and says on the
run's console what only it knows (a Slurm job's id and state).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from rich.console import Console

    from ..facts.runner_state import RunnerView
    from ..fleet import Fleet
    from ..inventory import Inventory
    from ..plan import Plan


@dataclass
class Run:
    """One task's run, handed to every verb: the fleet (hosts, results, recap), the inventory it was
    loaded from (once per task), the console, and the plan as the person named it."""

    fleet: Fleet
    inv: Inventory
    console: Console
    plan: Plan | None = None
    plan_arg: str = ""        # the --plan value to repeat in a hint (`fab status --plan ...`)
    command: str = ""         # the fab command as typed (to say what to run again)
    check: bool = False
    verbose: bool = False


@dataclass
class Placement:
    """What `place` decided and wrote: each host's queue (the split) and what `start` needs."""

    queues: dict[str, list[str]]
    estimates: dict[str, dict[str, float]] = field(default_factory=dict)  # host -> configuration -> seconds
    split: Any = None   # the split's answer (its predicted makespan, printed beside the measured one at the end)
    detail: Any = None  # the backend's own: each placed host's campaign view over SSH, the job under Slurm


@dataclass
class Fetched:
    """What `fetch` brought back beside the files: per host the result files refused (one line each),
    the hosts whose runner still runs, and notes for the report."""

    refused: dict[str, list[str]] = field(default_factory=dict)
    running: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@runtime_checkable
class Backend(Protocol):
    """The verbs of a place where campaigns run (see the module's table)."""

    kind: str

    def place(self, run: Run, *, pins: dict[str, str], gate_runs: int, results: Path,
              durations_from: str | None) -> Placement | None:
        """Split the plan over the hosts (item times measured where a campaign ran: campaign/schedule/
        measured.py, `durations_from` a folder of an earlier one) and put each one's run spec where its
        runner reads it; None when nothing is to start (no host to run on, or check mode, which prints
        and places nothing)."""

    def start(self, run: Run, placement: Placement, *, wait: bool, poll: float) -> None:
        """Start the placed runners (a runner already running is followed, never started twice);
        with `wait`, follow them until every one has finished."""

    def view(self, run: Run) -> dict[str, RunnerView]:
        """Each host's campaign as its runner left it."""

    def stop(self, run: Run) -> None:
        """Stop the campaign's runners cleanly (each stops its server first)."""

    def fetch(self, run: Run, dest: Path) -> Fetched:
        """Each host's finished results into `dest`/<host> (only valid files replace local ones), with
        its provenance.json; a fault of the bastion's own storage is raised (bastion_io)."""

    def provision(self, run: Run, roles: list, undo: Any, *, partial: bool, options: dict) -> None:
        """Make (or, where the site owns the nodes, check) every host ready for a campaign."""


def end_of_campaign(console, views: dict[str, RunnerView], split) -> None:
    """What `fab bench` prints once every runner has finished: the campaign table, then the split's
    predicted makespan beside the measured one (none when this run followed a job it did not place)."""
    from ..campaign.schedule.measured import makespan_line
    campaign_table(console, views)
    if split is not None:
        console.print(makespan_line(split, views), markup=False, soft_wrap=True)


def campaign_table(console, views: dict[str, RunnerView]) -> None:
    """Every host's items, their status, attempts and last error: `fab status`, and `fab bench` at its end."""
    from rich.table import Table
    table = Table(title="campaign", title_justify="left")
    for col in ("host", "item", "status", "attempts", "error"):
        table.add_column(col, overflow="fold")
    for name, v in views.items():
        for item in (v.state or {}).get("items", []):
            table.add_row(name, item["name"], item["status"], str(item.get("attempts", "")),
                          (item.get("error") or "")[-300:])
    console.print(table)


def backend_for(inv: Inventory) -> Backend:
    """The inventory's backend: Slurm when its `scheduler:` block says so, else SSH."""
    if inv.slurm:
        from .slurm import SlurmBackend
        return SlurmBackend(inv.slurm)
    from .ssh import SshBackend
    return SshBackend()
