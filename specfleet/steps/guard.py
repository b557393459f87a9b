"""A step that applies only where a shell test holds (e.g. the host uses netplan)."""
from __future__ import annotations

from ..step import Change, Facts, Step

YES, NO = "@@onlyif-yes", "@@onlyif-no"


class OnlyIf(Step):
    def __init__(self, test: str, step: Step, *, otherwise: str = ""):
        self.test, self.step, self.otherwise = test, step, otherwise
        self.name = step.name
        self.needs_root = step.needs_root
        self.probe_needs_root = step.probe_needs_root

    def probe(self) -> str:
        return f"if ( {self.test} ) >/dev/null 2>&1; then echo {YES}; {self.step.probe() or 'true'}\nelse echo {NO}; fi"

    def _inner(self, facts: Facts) -> Facts | None:
        first, _, rest = facts.stdout.partition("\n")
        return Facts(rest, facts.rc) if first.strip() == YES else None

    def decide(self, facts: Facts) -> list[Change]:
        inner = self._inner(facts)
        return self.step.decide(inner) if inner is not None else []

    def report(self, facts: Facts) -> dict:
        inner = self._inner(facts)
        if inner is None:
            return {"skipped": self.otherwise} if self.otherwise else {}
        return self.step.report(inner)
