"""User errors: bad input from the person running fab, worded as one line.

Every kind of bad input (inventory, plan, a file the bastion must have, an
option) raises a UserError or a subclass, worded `<file>: <where>: <what> (<fix>)`.
One place turns it into that line on stderr and exit 1: the guard every task
runs in (tasks/common.py). Anything else that escapes a task is a bug, and is
reported as one (exit 70, the traceback in the event log).
"""
from __future__ import annotations

import os


class UserError(Exception):
    """Bad input: the message names the file (and host or field) and what to do about it."""


def read_bastion_file(path: str | os.PathLike, *, what: str, source: str, fix: str) -> bytes:
    """Bytes of a file the bastion must have; a UserError naming where it was asked for if not.

    `source` says who names the file (e.g. "plans/x.yml: field 'benchmark.dataset_path'").
    """
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UserError(f"{source}: {what} {path}: {e.strerror or e} ({fix})") from None
