"""What people see: one line per change or failure as it happens, and the recap.

Every string printed is masked (events.Redactor) before rich renders it:
after rendering, a secret may be wrapped across lines or split by styles.
"""
from __future__ import annotations

import os
import threading

from rich.console import Console
from rich.markup import escape as _escape
from rich.table import Table

from .events import Redactor
from .step import Status, StepResult


# Without a terminal (a log file, CI, a pipe) rich takes 80 columns and cuts every wider table to
# `│ v… │ w1 │ 2… │`; there, a table is as wide as its content and a line is never folded (COLUMNS,
# when set, still wins).
NO_TERMINAL_WIDTH = 100_000


class MaskedConsole(Console):
    """A rich Console that masks secrets in what it is given, before rendering; without a terminal,
    as wide as what it prints (NO_TERMINAL_WIDTH).

    Strings are masked directly; a Table's cells and title are masked as the
    table is printed (rich keeps them as strings until then).
    """

    def __init__(self, *args, redact: Redactor | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if "width" not in kwargs and not self.is_terminal and not os.environ.get("COLUMNS"):
            self.width = NO_TERMINAL_WIDTH
        self.redact = redact or Redactor()

    def print(self, *objects, **kwargs):  # noqa: A003 (rich's name)
        super().print(*(self._mask(o) for o in objects), **kwargs)

    def _mask(self, obj):
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, Table) and self.redact.secrets:
            if isinstance(obj.title, str):
                obj.title = self.redact(obj.title)
            for col in obj.columns:
                col._cells = [self.redact(c) if isinstance(c, str) else c for c in col._cells]
        return obj

STYLE = {
    Status.OK: "green", Status.CHANGED: "yellow", Status.FAILED: "bold red",
    Status.UNREACHABLE: "bold magenta", Status.SKIPPED: "cyan",
}


class Reporter:
    """Prints results as hosts finish them; ok lines only when verbose."""

    def __init__(self, console: Console | None = None, *, verbose: bool = False, diff: bool = False,
                 check: bool = False, redact: Redactor | None = None):
        self.console = console or MaskedConsole(highlight=False, redact=redact)
        self.redact = getattr(self.console, "redact", None) or redact or Redactor()
        self.verbose, self.diff, self.check = verbose, diff, check
        self._lock = threading.Lock()

    def __call__(self, r: StepResult) -> None:
        if r.status in (Status.OK, Status.SKIPPED) and not self.verbose:
            return
        label = "would change" if (r.status is Status.CHANGED and self.check) else r.status.value
        # the console masks each string it prints; step names and summaries carry values
        with self._lock:
            self.console.print(f"[{STYLE[r.status]}]{label:>12}[/] [bold]{r.host}[/]  {r.step}"
                               + (f"  [dim]({r.duration * 1000:.0f} ms)[/]" if self.verbose else ""))
            for c in r.changes:
                self.console.print(f"{'':>14}- {c.summary}", markup=False)
                if self.diff and c.diff:
                    # masked whole before it is split: a secret may hold a newline
                    for line in self.redact(c.diff).splitlines():
                        style = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
                        self.console.print(f"{'':>16}{line}", style=style, markup=False)
            if r.message and r.status in (Status.FAILED, Status.UNREACHABLE):
                self.console.print(f"{'':>14}{r.message}", style=STYLE[r.status], markup=False)

    def recap(self, counts: dict[str, dict[str, int]], dropped: dict[str, Status], title: str = "RECAP",
              not_ready: dict[str, str] | None = None) -> None:
        """One row per host; its result: failed/unreachable, else why it is not ready, else fine."""
        not_ready = not_ready or {}
        table = Table(title=title, title_justify="left")
        table.add_column("host")
        for s in Status:
            table.add_column(s.value, justify="right")
        table.add_column("result")
        for host, c in counts.items():
            result = dropped.get(host)
            verdict = (f"[{STYLE[result]}]{result.value}[/]" if result else
                       f"[yellow]not ready: {_escape(not_ready[host])}[/]" if host in not_ready else "[green]fine[/]")
            table.add_row(host, *[_cell(s, c[s.value]) for s in Status], verdict)
        self.console.print(table)


def _cell(s: Status, n: int) -> str:
    return f"[{STYLE[s]}]{n}[/]" if n and s is not Status.OK else str(n)
