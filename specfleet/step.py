"""The step model: facts in, changes out.

A step says what one aspect of a host should look like. It names the facts it
needs as a shell probe (run, batched with the other steps' probes, in one
remote round trip), decides from those facts which changes are needed, and
the fleet applies them unless in check mode. `decide` is a pure function of
the facts, so a step is unit-tested without SSH: facts in, commands out.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Status(str, enum.Enum):
    OK = "ok"
    CHANGED = "changed"
    FAILED = "failed"
    UNREACHABLE = "unreachable"
    SKIPPED = "skipped"


class StepFailed(Exception):
    """The host is not as it must be and the step cannot fix it; the message says what to do."""


@dataclass
class Facts:
    """What a step's probe printed, and the probe's exit code."""

    stdout: str = ""
    rc: int = 0

    @property
    def lines(self) -> list[str]:
        return [ln for ln in self.stdout.splitlines() if ln.strip()]


@dataclass
class Change:
    """One change a step would make: a summary for people and the shell to make it."""

    summary: str
    script: str = ""                          # remote shell text, every value quoted
    diff: str = ""                            # shown with --diff
    local_argv: list[str] | None = None       # run on the bastion instead (rsync)


@dataclass
class StepResult:
    host: str
    step: str
    status: Status
    changes: list[Change] = field(default_factory=list)
    message: str = ""
    stderr_tail: str = ""
    duration: float = 0.0
    data: dict = field(default_factory=dict)  # facts a step reports (e.g. `fab facts`)

    @property
    def changed(self) -> bool:
        return self.status is Status.CHANGED


class Step:
    """Base class. Subclasses set `name` and override `probe` and `decide`."""

    name: str = "step"
    #: applying needs root (sudo for a non-root login)
    needs_root: bool = True
    #: the probe needs root too (e.g. it reads a 0600 file)
    probe_needs_root: bool = False

    def probe(self) -> str:
        """Shell text printing the facts `decide` needs ('' = none)."""
        return ""

    def local_facts(self) -> Facts | None:
        """Facts gathered on the bastion instead of the host (e.g. `rsync -n -i`)."""
        return None

    def decide(self, facts: Facts) -> list[Change]:
        """Changes needed, given the facts; [] when the host is already right."""
        return []

    def report(self, facts: Facts) -> dict:
        """Data worth showing or using after the run (optional)."""
        return {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
