"""The step model: facts in, changes out.

A step says what one aspect of a host should look like. It names the facts it
needs (`facts()`: name -> specfleet.facts Fact, each a shell probe and a parser
into a typed value); the fleet gathers the facts of all pending steps of a host
in one remote round trip (a fact two steps ask for is gathered once), and the
bastion-side ones on the bastion, then `decide` says from those values which
changes are needed, and the fleet applies them unless in check mode. `decide`
is a pure function of the values: a step is unit-tested without SSH, from
fixture files (tests/steps/<step>/*.json: facts in, changes out).
"""
from __future__ import annotations

import enum
import hashlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterator, Protocol


class Probe(Protocol):
    """What a step asks to be gathered: a specfleet.facts Fact (its shell and its parser). Named here,
    not imported: the facts import the step model (StepFailed, Step), never the other way round."""

    where: ClassVar[str]          # "host" or "bastion"
    needs_root: ClassVar[bool]

    def command(self) -> str: ...

    def parse(self, stdout: str, rc: int) -> Any: ...


class Status(str, enum.Enum):
    OK = "ok"
    CHANGED = "changed"
    FAILED = "failed"
    UNREACHABLE = "unreachable"
    SKIPPED = "skipped"


class StepFailed(Exception):
    """The host is not as it must be and the step cannot fix it; the message says what to do."""


@dataclass(frozen=True)
class HostStatus:
    """What a host's work in `Fleet.each` says of itself: its status, one line for the recap, data for
    the event log. Work that returns anything else succeeded (Status.OK) and that is its value."""

    status: Status
    message: str = ""
    data: dict = field(default_factory=dict)


#: what `decide` and `report` receive: the value of each fact the step named, by its name
Values = dict[str, Any]


CHUNK = 1 << 20  # a payload is read and sent 1 MiB at a time, never held whole for a file source

_digest_lock = threading.Lock()
_digests: dict[str, tuple[tuple, str]] = {}


@dataclass(frozen=True)
class Payload:
    """Bytes a change carries to the host: sent on its script's stdin, never inside the command text.

    Either `data` (bytes in memory: a rendered file) or `source` (a file on the bastion, read in
    chunks as it is sent, so its size does not matter). `size` and `sha256` are known before
    anything is sent: the probe compares checksums, and the receiving script refuses a stream
    that does not match them (a dropped connection never leaves a truncated file behind).
    """

    data: bytes | None = field(default=None, repr=False)
    source: str | None = None
    size: int = 0
    sha256: str = ""

    @classmethod
    def of_bytes(cls, data: bytes) -> "Payload":
        return cls(data=data, size=len(data), sha256=hashlib.sha256(data).hexdigest())

    @classmethod
    def of_file(cls, path: str | os.PathLike) -> "Payload":
        """A bastion file; its checksum is computed once per content version, shared by every host."""
        path = str(path)
        st = os.stat(path)
        version = (st.st_ino, st.st_size, st.st_mtime_ns)
        with _digest_lock:
            hit = _digests.get(path)
        if hit and hit[0] == version:
            return cls(source=path, size=st.st_size, sha256=hit[1])
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        with _digest_lock:
            _digests[path] = (version, digest)
        return cls(source=path, size=st.st_size, sha256=digest)

    def chunks(self) -> Iterator[bytes]:
        if self.data is not None:
            for i in range(0, len(self.data), CHUNK):
                yield self.data[i:i + CHUNK]
            return
        with open(self.source, "rb") as f:
            yield from iter(lambda: f.read(CHUNK), b"")

    def head(self, limit: int) -> bytes | None:
        """The whole content if it is at most `limit` bytes (for a diff), else None."""
        if self.size > limit:
            return None
        return self.data if self.data is not None else Path(self.source).read_bytes()


@dataclass
class Change:
    """One change a step would make: a summary for people and the shell to make it."""

    summary: str
    script: str = ""                          # remote shell text, every value quoted
    diff: str = ""                            # shown with --diff
    local_argv: list[str] | None = None       # run on the bastion instead (rsync)
    payload: Payload | None = None            # streamed to `script`'s stdin (it runs as its own command)


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
    value: Any = field(default=None, repr=False)  # what a reading step answered (Step.read; Fleet.facts)

    @property
    def changed(self) -> bool:
        return self.status is Status.CHANGED


class Step:
    """Base class. Subclasses set `name` and override `facts` and `decide`."""

    name: str = "step"
    #: applying needs root (sudo for a non-root login)
    needs_root: bool = True
    #: the step's host facts are gathered as root too (e.g. one reads a 0600 file)
    probe_needs_root: bool = False

    def facts(self) -> dict[str, Probe]:
        """The facts `decide` needs, by the name `decide` reads them under."""
        return {}

    def bastion_facts(self, values: Values) -> dict[str, Probe]:
        """Bastion-side facts that depend on the host's (e.g. `rsync -n -i` only when the
        listings differ); gathered after the host's facts, before `decide`."""
        return {}

    def decide(self, facts: Values) -> list[Change]:
        """Changes needed, given the facts' values; [] when the host is already right."""
        return []

    def report(self, facts: Values) -> dict:
        """Data worth showing or using after the run (optional)."""
        return {}

    def read(self, facts: Values) -> Any:
        """What a step that reads a host answers from its facts (optional): `Fleet.facts` returns it
        per host, so no step keeps what it read on itself."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
