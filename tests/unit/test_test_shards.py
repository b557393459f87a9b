"""scripts/test-shards: N pytest processes in their own namespaces share the units; every test runs once,
the closing line adds up their JSON reports, a failure anywhere fails the run."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.sharding import estimated_s, unit_of

ROOT = Path(__file__).resolve().parents[2]

needs_namespaces = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                      reason="scripts/isolated needs root and unshare")


def _suite(tmp_path: Path) -> Path:
    d = tmp_path / "suite"
    d.mkdir()
    # each test records which process ran it (its network namespace: one per process)
    body = textwrap.dedent("""
        import os, pytest
        OUT = {out!r}

        @pytest.fixture(scope="module")
        def shared():
            yield object()
            open(os.path.join(OUT, "teardown-" + __name__), "a").write(os.readlink("/proc/self/ns/net") + "\\n")

        @pytest.mark.parametrize("i", range({n}))
        def test_x(shared, i):
            open(os.path.join(OUT, __name__ + "-" + str(i)), "w").write(os.readlink("/proc/self/ns/net"))
            assert not ({fail} and i == 0), "this one fails"
    """)
    out = tmp_path / "out"
    out.mkdir()
    for name, n, fail in (("test_a", 3, False), ("test_b", 2, True), ("test_c", 4, False), ("test_d", 1, False)):
        (d / f"{name}.py").write_text(body.format(out=str(out), n=n, fail=fail))
    return d


@needs_namespaces
def test_two_processes_share_the_units_and_the_closing_line_adds_them_up(tmp_path):
    suite = _suite(tmp_path)
    scratch = tmp_path / "scratch"  # the driver's claims folder goes here (TMPDIR)
    scratch.mkdir()
    table = tmp_path / "unit_seconds.json"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "test-shards"), "--shards", "2",
                        "-p", "tests.sharding", "-q", str(suite)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch),
                            "SPECFLEET_TEST_RECORD": str(table)})  # as .ci/run records it (= --record)
    last = p.stdout.strip().splitlines()[-1]
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-2000:]
    assert re.fullmatch(r"=+ 1 failed, 9 passed in [\d.]+s \(2 processes\) =+", last), last
    assert "ran twice" not in p.stdout and "never ran" not in p.stdout, p.stdout[-3000:]
    out = tmp_path / "out"
    ran = sorted(f.name for f in out.iterdir() if not f.name.startswith("teardown-"))
    assert len(ran) == 10, ran
    # a module runs whole in one process, and its module fixture is torn down once, there
    for mod in ("test_a", "test_b", "test_c", "test_d"):
        where = {(out / f).read_text() for f in ran if f.startswith(mod + "-")}
        assert len(where) == 1, (mod, where)
        assert (out / f"teardown-{mod}").read_text().splitlines() == list(where), mod
    assert "process 1" in p.stdout and "process 2" in p.stdout
    assert list(scratch.iterdir()) == []  # its claims folder is gone
    # every unit's wall time, recorded for the next run's order, and each process's end printed
    recorded = json.loads(table.read_text())
    assert {Path(u).name: r["tests"] for u, r in recorded.items()} == \
        {"test_a.py": 3, "test_b.py": 2, "test_c.py": 4, "test_d.py": 1}, recorded
    assert all(r["s"] >= 0 for r in recorded.values())
    assert re.search(r"^process 1: \d+ units, its last unit ended at \d+ s", p.stdout, re.M), p.stdout[-3000:]
    assert "longest units" in p.stdout


def test_a_unit_is_a_module_or_the_real_vllm_folder():
    assert unit_of("tests/e2e/test_bench.py::test_x[1]") == "tests/e2e/test_bench.py"
    assert unit_of("tests/real_vllm/test_real_vllm_local.py::test_venv_versions") == "tests/real_vllm"
    assert unit_of("tests/real_vllm/test_real_vllm_fleet.py::test_y") == "tests/real_vllm"


def test_units_are_offered_by_their_measured_time_and_a_new_one_by_its_tiers_mean_per_test():
    table = {"tests/e2e/test_a.py": {"s": 300.0, "tests": 10}, "tests/e2e/test_b.py": {"s": 100.0, "tests": 10},
             "tests/unit/test_c.py": {"s": 2.0, "tests": 4}}
    est = estimated_s({"tests/e2e/test_a.py": 10, "tests/e2e/test_new.py": 3, "tests/unit/test_new.py": 6,
                       "tests/docs/test_new.py": 2, "tests/other/test_new.py": 5}, table)
    assert est == {"tests/e2e/test_a.py": 300.0, "tests/e2e/test_new.py": 60.0,  # 400 s / 20 tests, x 3
                   "tests/unit/test_new.py": 3.0, "tests/docs/test_new.py": 20.0, "tests/other/test_new.py": 5.0}
