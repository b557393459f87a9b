"""benchmark.request_rates: open-loop cells beside the concurrencies, seeded, passed to vllm bench serve,
parsed back from the file names; the simulated engine's bench takes the same flags."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from specfleet.campaign.commands import Paths, bench_argv
from specfleet.plan import PlanError, parse_plan
from specfleet.plan.sweep import parse_cell, parse_result_name
from specfleet.yamlfile import load_yaml

ROOT = Path(__file__).resolve().parents[2]
PATHS = Paths(venv="/v", work_dir="/w", dataset="/d")


def raw(**bench):
    r = load_yaml(ROOT / "plans" / "demo.yml")
    r["benchmark"].update(bench)
    return r


def test_rate_cells_flags_and_names():
    p = parse_plan(raw(request_rates=[2, 0.5, "inf"], burstiness=0.5, seed=7), "plans/demo.yml")
    assert [c.name for c in p.benchmark.cells] == ["conc1-rate2", "conc1-rate0.5", "conc1",
                                                   "conc16-rate2", "conc16-rate0.5", "conc16"]
    cell = p.benchmark.cells[4]
    argv = bench_argv(p, "w1", "eagle3", cell, PATHS)
    i = argv.index("--request-rate")
    assert argv[i:i + 6] == ["--request-rate", "0.5", "--burstiness", "0.5", "--seed", "7"]
    # no cap at a set rate: a capped client holds arrivals back outside their TTFT (coordinated omission)
    assert "--max-concurrency" not in argv and "arrival_seed=7" in argv
    assert argv[argv.index("--result-filename") + 1] == "eagle3_conc16-rate0.5_r1.json"
    closed = bench_argv(p, "w1", "eagle3", p.benchmark.cells[5], PATHS)
    assert "--request-rate" not in closed and "--seed" not in closed
    assert closed[closed.index("--max-concurrency") + 1] == "16"
    assert parse_cell("conc16-rate0.5")["request_rate"] == 0.5 and parse_cell("conc16")["request_rate"] is None
    assert parse_result_name("eagle3_conc16-rate0.5_r3.json") == ("eagle3", "conc16-rate0.5", 16, 3)


def test_closed_loop_plans_keep_their_hash():
    plain = parse_plan(raw(), "plans/demo.yml")
    assert '"burstiness"' not in plain.canonical_json() and '"seed"' not in plain.canonical_json()
    assert parse_plan(raw(burstiness=2.0), "plans/demo.yml").plan_hash() == plain.plan_hash()
    a = parse_plan(raw(request_rates=[2], seed=1), "plans/demo.yml")
    b = parse_plan(raw(request_rates=[2], seed=2), "plans/demo.yml")
    assert len({plain.plan_hash(), a.plan_hash(), b.plan_hash()}) == 3


@pytest.mark.parametrize("rates, error", [([2, 2], "distinct rates > 0"), ([0], "distinct rates > 0"),
                                          ([], "at least 1 item"), ([float("nan")], "distinct rates > 0"),
                                          (list(range(1, 10_002)), "at most 32 items")])
def test_bad_rates(rates, error):
    with pytest.raises(PlanError, match=r"field 'benchmark.*" + error):
        parse_plan(raw(request_rates=rates), "plans/demo.yml")


def test_the_simulated_bench_takes_the_flags():
    sys.path.insert(0, str(ROOT / "testbed" / "simvllm"))
    try:
        cli = importlib.import_module("vllm.cli")
        p = parse_plan(raw(request_rates=[4], burstiness=0.25, seed=3), "plans/demo.yml")
        argv = bench_argv(p, "w1", "vanilla", p.benchmark.cells[0], PATHS)
        args = cli.bench_serve_parser().parse_args(argv[3:])
    finally:
        sys.path.remove(str(ROOT / "testbed" / "simvllm"))
        for m in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[m]
    assert (args.request_rate, args.burstiness, args.seed, args.max_concurrency) == (4.0, 0.25, 3, None)
