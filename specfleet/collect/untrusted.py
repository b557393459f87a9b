"""What the bastion takes from a worker: a worker is untrusted input (docs/security.md).

`fab collect` lists the run folder first (find never follows a link) and fetches only the entries that
pass `refusal()`; an entry swapped after the listing is still caught on the bastion by lstat
(`staged_refusal`) before anything reads it. The size limits are the plan's `collect` fields
(specfleet.plan.Collect holds the defaults).
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

MB = 1024 * 1024
# one name in one folder: no '/', not '.'/'..', no control characters, not starting with '-'
SAFE_NAME_RE = re.compile(r"^(?!\.{1,2}$)(?!-)[^/\x00-\x1f\x7f]{1,255}\Z")


@dataclass(frozen=True)
class Limits:
    result_bytes: int
    log_bytes: int

    @classmethod
    def of_plan(cls, plan) -> "Limits":
        return cls.of_collect(plan.collect)

    @classmethod
    def of_collect(cls, c) -> "Limits":
        return cls(int(c.max_result_mb * MB), int(c.max_log_mb * MB))

    @classmethod
    def default(cls) -> "Limits":
        """The plan's defaults (specfleet.plan.Collect), for a caller without a plan."""
        from ..plan import Collect
        return cls.of_collect(Collect())

    def for_name(self, name: str) -> int:
        return self.log_bytes if _is_log(name) else self.result_bytes

    @property
    def largest(self) -> int:
        return max(self.result_bytes, self.log_bytes)


def refusal(name: str, kind: str, nlink: int, size: int, limits: Limits) -> str | None:
    """Why a listed entry (find's %y type letter, link count, size) is not fetched; None: fetch it."""
    if not SAFE_NAME_RE.match(name):
        return f"the name {name!r} is not a plain file name"
    if kind != "f":
        what = {"l": "a symbolic link", "d": "a directory", "p": "a FIFO", "s": "a socket",
                "c": "a character device", "b": "a block device"}.get(kind, f"not a regular file (type {kind!r})")
        return f"{what}: only regular files are taken from a worker"
    if nlink > 1:
        return f"a hard link ({nlink} names for one file): only files with one name are taken from a worker"
    limit = limits.for_name(name)
    if size > limit:
        field = "max_log_mb" if _is_log(name) else "max_result_mb"
        return f"{size} bytes, over the {limit / MB:g} MB limit (plan field collect.{field})"
    return None


def _is_log(name: str) -> bool:
    """A server log or the runner's log (the larger limit)."""
    from ..worker import layout
    return name.endswith(layout.SERVER_LOG_SUFFIX) or name == layout.RUNNER_LOG


def staged_refusal(path: Path, limits: Limits) -> str | None:
    """The same rules on what rsync left in the staging folder (lstat: a link is never followed)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot stat: {e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return f"a symbolic link to {target!r}: only regular files are taken from a worker"
    kind = "f" if stat.S_ISREG(st.st_mode) else "d" if stat.S_ISDIR(st.st_mode) else "p" \
        if stat.S_ISFIFO(st.st_mode) else "s" if stat.S_ISSOCK(st.st_mode) else "c" \
        if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode) else "?"
    return refusal(path.name, kind, 1, st.st_size, limits)


def parse_listing(out: str) -> list[tuple[str, str, int, int]]:
    """(name, type letter, link count, size) from `find -printf '%y %n %s %P\\0'`."""
    entries = []
    for rec in out.split("\0"):
        head = rec.split(" ", 3)
        if len(head) == 4 and head[1].isdigit() and head[2].isdigit():
            entries.append((head[3], head[0], int(head[1]), int(head[2])))
    return entries


def listing_script(run_dir_q: str) -> str:
    """Shell that lists a run folder's top level, one NUL-terminated record per entry (`run_dir_q` quoted)."""
    return f"find {run_dir_q} -mindepth 1 -maxdepth 1 -printf '%y %n %s %P\\0' 2>/dev/null; true"
