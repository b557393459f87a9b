"""User errors: bad input from the person running fab, worded as one line.

Every kind of bad input (inventory, plan, a file the bastion must have, an
option) raises a UserError or a subclass, worded `<file>: <where>: <what> (<fix>)`.
One place turns it into that line on stderr and exit 1: the guard every task
runs in (tasks/common.py). Anything else that escapes a task is a bug, and is
reported as one (exit 70, the traceback in the event log).
"""
from __future__ import annotations


class UserError(Exception):
    """Bad input: the message names the file (and host or field) and what to do about it."""


def one_line(text: str) -> str:
    """`text` as one line: a newline or other control character in a value it quotes (a path with a
    newline) is shown as its escape (\\n), so the message stays the one line it is meant to be."""
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode() for c in str(text))
