"""A chaos run (issue 28): on 8 testbed workers, during one campaign per seed, a seeded and bounded
schedule (tests/e2e/chaos.py) drops SSH sessions, reboots a worker, SIGKILLs a runner and a server,
fills a worker's disk and frees it, and restarts `fab bench` / `fab collect` at random points. At the
end every planned cell is merged or listed with its cause, no merged number differs from its worker
file, no result was measured twice, no fab run crashed, and each seed stays within SEED_BUDGET_S.

The seeds are printed (`-s` shows them as they run; a failure names its seed): replay one with
SPECFLEET_CHAOS_SEEDS=<seed>. benchmarks/chaos_seeds.py runs more seeds and prints survived/lost.
"""
from __future__ import annotations

import os

import pytest

from chaos import run_seed
from e2e_helpers import fab, inventory_of

pytestmark = pytest.mark.e2e

SEEDS = [int(s) for s in os.environ.get("SPECFLEET_CHAOS_SEEDS", "11,23,37").split(",")]
# One seed: schedule, recovery and collect. Measured 44-58 s per seed at load 1-5 on 2 cores (2026-12-02,
# after the h-worker merge) and 48-76 s at load 9-10, where 75 s failed a seed whose every check held; the
# bound ends a seed that hangs, not one slowed by other work on the machine (benchmarks/chaos_seeds.py prints
# the times; 3 seeds + provision take ~3 minutes of the CI run)
SEED_BUDGET_S = 150


def test_a_chaos_run_loses_nothing(testbed_factory, tmp_path):
    tb = testbed_factory(workers=8)
    prov = fab("provision", inventory=inventory_of(tb), runs=tmp_path / "runs-provision", timeout=300)
    assert prov.returncode == 0, prov.stdout[-3000:] + prov.stderr[-2000:]
    for seed in SEEDS:
        print(f"\n[chaos] seed {seed} (replay: SPECFLEET_CHAOS_SEEDS={seed})")
        o = run_seed(tb, tmp_path, seed)
        where = f"seed {seed}, schedule {o.schedule}"
        assert not o.crashes, f"{where}: {o.crashes}"
        assert o.cells, f"{where}: no planned cells in the report"
        assert not o.lost, f"{where}: cells neither merged nor listed with a cause: {o.lost}"
        assert not o.mismatched, f"{where}: {o.mismatched}"
        assert not o.twice and not o.rewritten, f"{where}: measured twice {o.twice}, rewritten {o.rewritten}"
        assert o.seconds < SEED_BUDGET_S, f"{where}: took {o.seconds:.0f} s (budget {SEED_BUDGET_S} s)"
