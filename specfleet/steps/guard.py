"""A step that applies only where a shell test holds (e.g. the host uses netplan)."""
from __future__ import annotations

from ..facts.system import ShellTest
from ..step import Change, Step, Values

APPLIES = "applies"  # the test's fact, next to the inner step's own


class OnlyIf(Step):
    def __init__(self, test: str, step: Step, *, otherwise: str = ""):
        self.test, self.step, self.otherwise = test, step, otherwise
        self.name = step.name
        self.needs_root = step.needs_root
        self.probe_needs_root = step.probe_needs_root

    def facts(self) -> dict:
        inner = self.step.facts()
        if APPLIES in inner:
            raise ValueError(f"{self.step!r} names a fact {APPLIES!r}, which OnlyIf uses")
        return {APPLIES: ShellTest(self.test), **inner}

    def bastion_facts(self, values: Values) -> dict:
        return self.step.bastion_facts(values) if values[APPLIES] else {}

    def decide(self, facts: Values) -> list[Change]:
        return self.step.decide(facts) if facts[APPLIES] else []

    def report(self, facts: Values) -> dict:
        if not facts[APPLIES]:
            return {"skipped": self.otherwise} if self.otherwise else {}
        return self.step.report(facts)
