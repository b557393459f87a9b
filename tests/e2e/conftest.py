"""Fixtures that bring up the namespace testbed (docs/testbed.md).

Several engineers share this machine, and there is only one 10.10.30.0/24:
every fixture holds an exclusive flock on LOCK for its whole life, so a second
pytest process waits instead of colliding.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from testbed import Testbed

LOCK = "/run/specfleet-testbed.lock"
NEEDS = ("ip", "nsenter", "unshare", "socat", "mount")
_shared: list = []  # (Testbed, up kwargs) of live module-scoped testbeds in this process


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the testbed needs root (network namespaces, mounts)"
    missing = [c for c in NEEDS if not shutil.which(c)] + [p for p in ("/usr/sbin/sshd",) if not os.path.exists(p)]
    if missing:
        return f"the testbed needs {', '.join(missing)} (see docs/testbed.md)"
    try:
        ok = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return None if ok else "`ip netns` is not available here"


_held = {"fd": None, "depth": 0}  # re-entrant within this process (flock is per open file)


@contextlib.contextmanager
def testbed_lock():
    """Exclusive, blocking lock: wait for any other testbed user on this machine."""
    if _held["depth"] == 0:
        fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"\n[testbed] {LOCK} is held by another process; waiting...", file=sys.stderr)
            t0 = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
            print(f"[testbed] got the lock after {time.monotonic() - t0:.1f} s", file=sys.stderr)
        _held["fd"] = fd
        # `timeout`/CI send SIGTERM: turn it into KeyboardInterrupt so pytest
        # still runs the fixture teardown (down) instead of leaking namespaces
        signal.signal(signal.SIGTERM, _term)
    _held["depth"] += 1
    try:
        yield
    finally:
        _held["depth"] -= 1
        if _held["depth"] == 0:
            os.close(_held["fd"])  # closing the descriptor releases the lock
            _held["fd"] = None


def _term(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


def _require() -> None:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def testbed_factory(tmp_path):
    """`up(workers=4, **kw) -> Testbed`; everything it made is torn down afterwards."""
    _require()
    made: list[Testbed] = []
    with testbed_lock():
        # Only one testbed can exist: a module-scoped one of this process
        # (testbed4) is taken down for this test and rebuilt afterwards.
        paused = [(tb, kw) for tb, kw in _shared if tb.state()]
        for tb, _ in paused:
            tb.down()

        def up(workers: int = 4, **kw) -> Testbed:
            tb = Testbed()
            kw.setdefault("inventory_path", tmp_path / "testbed.yml")
            made.append(tb)
            tb.up(workers, **kw)
            return tb

        try:
            yield up
        finally:
            for tb in made:
                tb.down()
            for tb, kw in paused:
                tb.up(**kw)


@contextlib.contextmanager
def module_testbed(tmp_path_factory, name: str, **kw):
    """A testbed shared by one test module (`Testbed.up(**kw)`); a testbed_factory test of the same
    process pauses it and brings it back. Tests must undo what they change."""
    _require()
    with testbed_lock():
        tb = Testbed()
        kw = {**kw, "inventory_path": tmp_path_factory.mktemp(name) / "testbed.yml"}
        _shared.append((tb, kw))
        try:
            tb.up(**kw)
            yield tb
        finally:
            _shared.remove((tb, kw))
            tb.down()


@pytest.fixture(scope="module")
def testbed4(tmp_path_factory):
    """Four workers shared by one test module; tests must undo what they change."""
    with module_testbed(tmp_path_factory, "testbed4", workers=4) as tb:
        yield tb


@pytest.fixture(scope="module")
def module_bed(request, tmp_path_factory):
    """The testbed the module asks for in `MODULE_TESTBED` (Testbed.up's keywords), shared by its tests."""
    with module_testbed(tmp_path_factory, request.module.__name__.rpartition(".")[2],
                        **request.module.MODULE_TESTBED) as tb:
        yield tb
