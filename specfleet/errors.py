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
