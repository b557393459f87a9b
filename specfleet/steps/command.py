"""A command that runs only when needed: guarded by `creates` or `unless`."""
from __future__ import annotations

from ..shell import q
from ..step import Change, Facts, Step, StepFailed


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

    def probe(self) -> str:
        checks = []
        if self.creates:
            checks.append(f"[ -e {q(self.creates)} ]")
        if self.unless:
            checks.append(f"( {self.unless} ) >/dev/null 2>&1")
        return f"if {' && '.join(checks)}; then echo DONE; else echo TODO; fi"

    def decide(self, facts: Facts) -> list[Change]:
        if facts.lines[-1:] == ["DONE"]:
            return []
        if facts.lines[-1:] != ["TODO"]:
            raise StepFailed(f"could not evaluate the guard of {self.name!r}")
        return [Change(self.name, self.script)]


class Assert(Step):
    """A check with nothing to change: fails the host with `message` when `test` fails."""

    def __init__(self, name: str, test: str, message: str, *, needs_root: bool = False):
        self.name, self.test, self.message = name, test, message
        self.needs_root = False
        self.probe_needs_root = needs_root

    def probe(self) -> str:
        return f"out=$( ( {self.test} ) 2>&1 ); rc=$?; printf '%s\\n' \"$out\" | tail -n 5; echo \"@rc=$rc\""

    def decide(self, facts: Facts) -> list[Change]:
        rc_line = next((ln for ln in reversed(facts.lines) if ln.startswith("@rc=")), "@rc=1")
        if rc_line != "@rc=0":
            detail = " / ".join(ln for ln in facts.lines if not ln.startswith("@rc="))
            raise StepFailed(f"{self.message}" + (f" ({detail})" if detail else ""))
        return []
