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
import subprocess
import types
import typing
from typing import Any, ClassVar, Union

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


# ---------------------------------------------------------------- values from JSON (fixture tests)
def from_json(tp: Any, data: Any) -> Any:
    """`data` (parsed JSON) as a value of type `tp`: dataclasses, lists, tuples, dicts, Optional."""
    if data is None:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        for a in inner:
            try:
                return from_json(a, data)
            except (TypeError, ValueError, KeyError):
                continue
        raise ValueError(f"{data!r} is none of {inner}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise TypeError(f"{tp.__name__} wants an object, not {data!r}")
        hints = typing.get_type_hints(tp)
        return tp(**{k: from_json(hints[k], v) for k, v in data.items()})
    if origin is list:
        return [from_json(args[0], x) for x in data]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_json(args[0], x) for x in data)
        return tuple(from_json(a, x) for a, x in zip(args, data))
    if origin is dict:
        return {k: from_json(args[1], v) for k, v in data.items()}
    if tp is bytes:
        return data.encode() if isinstance(data, str) else bytes(data)
    if tp in (int, float, str, bool):
        if tp is float and isinstance(data, int):
            return float(data)
        if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
            raise TypeError(f"{data!r} is not {tp.__name__}")
        return data
    return data
