"""A command that runs only when needed: guarded by `creates` or `unless`."""
from __future__ import annotations

from ..facts.system import ShellCheck, ShellTest
from ..shell import q
from ..step import Change, Step, StepFailed, Values


class Command(Step):
    """Run `script` unless `creates` exists or `unless` succeeds on the host.

    Without a guard a command would run on every run and never report ok, so
    one of the two is required: idempotence is the point of a step.
    """

    def __init__(self, name: str, script: str, *, creates: str | None = None, unless: str | None = None,
                 needs_root: bool = True):
        if not (creates or unless):
            raise ValueError(f"command step {name!r} needs a 'creates' or 'unless' guard")
        self.name, self.script = name, script
        self.creates, self.unless = creates, unless
        self.needs_root = needs_root
        self.probe_needs_root = needs_root

    def facts(self) -> dict:
        checks = []
        if self.creates:
            checks.append(f"[ -e {q(self.creates)} ]")
        if self.unless:
            checks.append(f"( {self.unless} )")
        return {"done": ShellTest(" && ".join(checks))}

    def decide(self, facts: Values) -> list[Change]:
        return [] if facts["done"] else [Change(self.name, self.script)]


class Assert(Step):
    """A check with nothing to change: fails the host with `message` when `test` fails."""

    def __init__(self, name: str, test: str, message: str, *, needs_root: bool = False):
        self.name, self.test, self.message = name, test, message
        self.needs_root = False
        self.probe_needs_root = needs_root

    def facts(self) -> dict:
        return {"check": ShellCheck(self.test)}

    def decide(self, facts: Values) -> list[Change]:
        check = facts["check"]
        if check.rc != 0:
            detail = " / ".join(check.tail)
            raise StepFailed(f"{self.message}" + (f" ({detail})" if detail else ""))
        return []
