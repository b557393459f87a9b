"""A testbed for one benchmark run: the test fixtures' flock held for its whole life, always torn down.

Same lock file and semantics as tests/e2e/conftest.py (`LOCK`, `testbed_lock`): an exclusive
flock on /run/specfleet-testbed.lock, so a benchmark waits for pytest runs on this machine
and they wait for it. SIGTERM becomes KeyboardInterrupt so the `finally` still tears down.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testbed import Testbed  # noqa: E402

LOCK = "/run/specfleet-testbed.lock"  # = tests/e2e/conftest.py LOCK


def _term(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


@contextlib.contextmanager
def testbed_session(workers: int, inventory_path: Path) -> Iterator[tuple[Testbed, Path]]:
    """Hold the lock, bring up `workers` hosts, yield (testbed, inventory), always take it down."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"[testbed] {LOCK} is held by another process; waiting...", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
            print(f"[testbed] got the lock after {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        old = signal.signal(signal.SIGTERM, _term)
        tb = Testbed()
        try:
            t0 = time.monotonic()
            inv = tb.up(workers, inventory_path=inventory_path)
            print(f"[testbed] {workers} workers up in {time.monotonic() - t0:.2f} s", file=sys.stderr, flush=True)
            yield tb, inv
        finally:
            took = tb.down()
            print(f"[testbed] down in {took:.2f} s", file=sys.stderr, flush=True)
            signal.signal(signal.SIGTERM, old)
    finally:
        os.close(fd)  # releases the lock


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def spread(xs: list[float]) -> str:
    return f"{min(xs):.3f}-{max(xs):.3f}" if xs else "-"
