"""A fact: the shell that gathers one small named thing about a host, and its parser (docs/dev/add-a-fact.md).

As pyinfra's facts (`command()` + `process(lines)`), with two differences: a fact is
a frozen dataclass whose fields are its arguments, so two steps that ask for the same
fact on a host share one probe; and every fact of every pending step of a host travels
in ONE remote round trip (specfleet.shell.ProbeBatch frames each probe's stdout and
exit code, so no fact needs in-band markers of its own). `parse`'s return annotation names
the value's type, which the fixture tests read a value from JSON as.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import typing
from typing import Any, ClassVar

import pydantic

from ..step import StepFailed


class FactError(StepFailed):
    """A fact's output could not be understood; the step that needs it fails with this message."""


@dataclasses.dataclass(frozen=True)
class Fact:
    where: ClassVar[str] = "host"
    needs_root: ClassVar[bool] = False  # gathered as root (sudo for a non-root login)

    def command(self) -> str:
        raise NotImplementedError

    def parse(self, stdout: str, rc: int) -> Any:
        raise NotImplementedError

    def gather_local(self) -> Any:
        """The value, computed here (for a bastion fact; a host fact's command run locally)."""
        p = subprocess.run(["bash", "-c", self.command()], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        return self.parse(p.stdout, p.returncode)

    @classmethod
    def value_type(cls) -> Any:
        return typing.get_type_hints(cls.parse)["return"]


def lines(stdout: str) -> list[str]:
    """Non-blank lines, right-stripped."""
    return [ln.rstrip() for ln in stdout.splitlines() if ln.strip()]


def from_json(tp: Any, data: Any) -> Any:
    """`data` (parsed JSON, as the fixture tests hold a fact's value) as a value of type `tp`, checked as
    strictly as JSON can say it (pydantic: dataclasses, lists, tuples, dicts, Optional, bytes)."""
    return pydantic.TypeAdapter(tp).validate_json(json.dumps(data), strict=True)
