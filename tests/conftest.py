"""Every tier: Ctrl-C reaches the commands the tests start.

A shell without job control starts background jobs (`.ci/run &`, nohup, some CI runners) with SIGINT
ignored, and an ignored signal stays ignored across exec: the `fab` a test interrupts would never see
its Ctrl-C (no KeyboardInterrupt, no exit 130) and the tests of that path would fail for a reason that
is not the product's. A handler, unlike SIG_IGN, is reset to the default at exec, so installing
Python's own here gives every child the terminal's behaviour.
"""
import signal

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# ---- each tier's wall time, printed at the end (before pytest's own last line, which CI reads) ----
# A tier is a top-level folder of tests/; its time is the sum of its tests' setup + call + teardown
# (module fixtures such as a shared testbed fall into the test that sets them up or tears them down).
import os  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402

_tier_s: dict[str, float] = defaultdict(float)
_tier_n: dict[str, int] = defaultdict(int)
_started: dict[str, float] = {}


def _tier(nodeid: str) -> str:
    parts = nodeid.split("::")[0].split("/")
    return "/".join(parts[:2]) if parts[0] == "tests" and len(parts) > 2 else parts[0]


_session = {}


def pytest_sessionstart(session):
    _session["t0"] = time.monotonic()


def pytest_collection_finish(session):
    _session["collect_s"] = time.monotonic() - _session.get("t0", time.monotonic())


def pytest_runtest_logstart(nodeid, location):
    _started[nodeid] = time.monotonic()


def pytest_runtest_logfinish(nodeid, location):
    t0 = _started.pop(nodeid, None)
    if t0 is not None:
        _tier_s[_tier(nodeid)] += time.monotonic() - t0
        _tier_n[_tier(nodeid)] += 1


def pytest_terminal_summary(terminalreporter):
    if not _tier_s:
        return
    tr = terminalreporter
    tr.section("wall time per tier")
    rows = [(tier, f"{_tier_n[tier]:>5} tests", _tier_s[tier]) for tier in sorted(_tier_s, key=lambda t: -_tier_s[t])]
    rows.append(("collection", "", _session.get("collect_s", 0.0)))
    setup = os.environ.get("SPECFLEET_SETUP_S")  # scripts/test's scripts/setup.sh, when it ran it
    if setup:
        rows.append(("scripts/setup.sh", "", float(setup)))
    for name, n, s in rows:
        tr.write_line(f"{name:<24} {n:>11} {s:>9.1f} s")
    tr.write_line(f"{'total':<24} {sum(_tier_n.values()):>5} tests {sum(r[2] for r in rows):>9.1f} s")
