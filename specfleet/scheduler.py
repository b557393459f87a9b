"""The inventory's `scheduler:` block: which dispatcher `fab bench` uses (ssh, the default, or slurm;
the fields are in docs/slurm.md). Validated with pydantic: every error is one line naming the
inventory file and the field.
"""
from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from .yamlfile import matching

SLURM_WORD_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
TIME_RE = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$|^\d+-\d+$")
OPTION_RE = re.compile(r"^--[a-z][a-z0-9-]*(=.*)?$")
# options specfleet sets itself: an extra_args copy would contradict the script (docs/slurm.md)
OWN_OPTIONS = ("--job-name", "--nodes", "--nodelist", "--ntasks-per-node", "--gpus-per-node", "--output",
               "--error", "--partition", "--account", "--time", "--signal", "--requeue", "--no-requeue",
               "--chdir", "--parsable", "--wrap", "--test-only")
DEFAULT_PENDING_TIMEOUT_S = 600.0
DEFAULT_STOP_SIGNAL_S = 120


def _line(v: str) -> str:
    if any(ord(c) < 32 or c == "\x7f" for c in v):
        raise ValueError(f"{v!r} holds a newline or control character")
    return v


def _abs(v: str) -> str:
    if not _line(v).startswith("/") or ".." in v.split("/"):
        raise ValueError(f"{v!r} is not an absolute path without '..'")
    return v.rstrip("/") or "/"


def _option(v: str) -> str:
    if not OPTION_RE.match(_line(v)):
        raise ValueError(f"{v!r} is not one sbatch option written --name or --name=value")
    name = v.split("=", 1)[0]
    if name in OWN_OPTIONS:
        raise ValueError(f"{name} is set by specfleet itself (see the scheduler fields in docs/slurm.md)")
    return v


SlurmWord = matching(SLURM_WORD_RE, "a Slurm name (letters, digits, '_', '.', '-'; not starting with '-')")
SlurmTime = matching(TIME_RE, "a Slurm time limit (MM, HH:MM:SS, D-HH:MM:SS, ...)")
AbsPath = Annotated[str, AfterValidator(_abs)]


class SshScheduler(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    kind: Literal["ssh"]


class SlurmScheduler(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    kind: Literal["slurm"]
    partition: SlurmWord
    account: SlurmWord | None = None
    time_limit: SlurmTime
    shared_dir: AbsPath
    slurm_conf: AbsPath | None = None
    extra_args: list[Annotated[str, AfterValidator(_option)]] = Field(default_factory=list)
    pending_timeout_s: float = Field(default=DEFAULT_PENDING_TIMEOUT_S, gt=0)
    stop_signal_s: int = Field(default=DEFAULT_STOP_SIGNAL_S, ge=0, le=65535)
    requeue: bool = True
    python: AbsPath = "/usr/bin/python3"


Scheduler = Annotated[SshScheduler | SlurmScheduler, Field(discriminator="kind")]
