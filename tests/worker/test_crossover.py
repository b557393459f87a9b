"""The crossover search (specfleet/worker/crossover.py): the algorithm on synthetic curves, the plan's
syntax, and the runner's refinement rounds against the fake vllm (resume measures nothing new)."""
import copy
import json
import math
import random
from types import SimpleNamespace
from dataclasses import replace

import pytest

from specfleet.worker import crossover
from specfleet.worker.crossover import FASTER, NO_DIFF, SLOWER, judge, next_points
from specfleet.worker.runspec import Crossover
from specfleet.plan.crossover_grid import coarse_grid, crossings, fine_grid
from specfleet.plan import crossover_grid
from specfleet.campaign.spec import crossover_spec
from specfleet.plan import Equivalence, PlanError, parse_plan
from specfleet.worker.runner import EXIT_OK
from specfleet.report.tables.measures import SPEEDUP_CONFIDENCE

TOL = Equivalence().tolerance_pct  # the plan's default, as the runner gets it


def search(measure, lo, hi, budget, coarse_factor=4, per_doubling=2):
    return crossover_grid.search(measure, lo, hi, budget, coarse_factor, per_doubling,
                            confidence=SPEEDUP_CONFIDENCE, tolerance_pct=TOL)


def test_grids_are_geometric_integers_with_the_coarse_grid_on_the_fine_one():
    assert fine_grid(1, 256, 2) == [1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128, 181, 256]
    assert fine_grid(1, 16, 1) == [1, 2, 4, 8, 16]
    assert coarse_grid(1, 256, 4) == [1, 4, 16, 64, 256]
    assert coarse_grid(1, 100, 4) == [1, 4, 16, 64, 100]
    for lo, hi, cf, pd in [(1, 256, 4, 2), (2, 200, 8, 4), (3, 96, 2, 3), (1, 64, 16, 1)]:
        fine = fine_grid(lo, hi, pd)
        assert set(coarse_grid(lo, hi, cf)) <= set(fine), (lo, hi, cf, pd)
        assert fine == sorted(set(fine)) and fine[0] == lo and fine[-1] == hi


def make_measure(curve, seed, noise=0.02, reps=3, fail=()):
    rng = random.Random(seed)

    def measure(c):
        if c in fail:
            return [], []
        base = [100 * c ** 0.8 * math.exp(rng.gauss(0, noise)) for _ in range(reps)]
        cfg = [100 * c ** 0.8 * curve(c) * math.exp(rng.gauss(0, noise)) for _ in range(reps)]
        return cfg, base
    return measure


def falling(c):  # eagle3-like: 2.1x at low load, crossing 1.0 at c = 40 (2.1^(1/0.6) - 1) = 97.75
    return 2.1 * (1 + c / 40) ** -0.6


TRUE_CROSS = 40 * (2.1 ** (1 / 0.6) - 1)


def test_noisy_falling_curve_crossover_located_within_one_fine_step():
    grid, inside = fine_grid(1, 256, 4), 0
    for seed in range(30):
        pts, rounds, why = search(make_measure(falling, seed), 1, 256, budget=14, per_doubling=4)
        assert why.startswith("done"), why
        assert len(pts) <= 14 and len(pts) <= len(grid) // 2
        (a, b), = crossings(pts)
        ia, ib = grid.index(a), grid.index(b)
        assert ib - ia == 1, (seed, a, b)
        # the estimate's crossing is the true one's, or (noise of 2 % per run) the step next to it
        assert grid[ia - 1] <= TRUE_CROSS <= grid[ib + 1], (seed, a, b)
        inside += a <= TRUE_CROSS <= b
        # the interval edges: the last "faster" and the first "slower" have a measured neighbour one step on
        conc = sorted(pts)
        last_fast = max(c for c in conc if pts[c]["verdict"] == FASTER)
        first_slow = min(c for c in conc if pts[c]["verdict"] == SLOWER)
        assert grid[grid.index(last_fast) + 1] in pts and grid[grid.index(first_slow) - 1] in pts
        assert all(pts[c]["verdict"] == FASTER for c in conc if c <= last_fast)
        assert rounds[0] == coarse_grid(1, 256, 4)
    assert inside >= 24  # 80 % of the seeds: the true crossover between the two points found


def test_flat_curve_is_no_measurable_difference_and_stops_after_the_coarse_grid():
    pts, rounds, why = search(make_measure(lambda c: 1.0, 3), 1, 256, budget=14)
    assert rounds == [coarse_grid(1, 256, 4)] and why.startswith("done")
    assert {p["verdict"] for p in pts.values()} == {NO_DIFF}


def test_no_crossover_in_range_pays_everywhere_and_stops_after_the_coarse_grid():
    pts, rounds, why = search(make_measure(lambda c: 1.8 - 0.1 * math.log2(c), 5), 1, 64, budget=10)
    assert rounds == [coarse_grid(1, 64, 4)] and why.startswith("done")
    assert crossings(pts) == [] and {p["verdict"] for p in pts.values()} == {FASTER}


def test_budget_exhausted_stops_at_the_budget_and_says_so():
    pts, rounds, why = search(make_measure(falling, 7), 1, 256, budget=7, per_doubling=4)
    assert len(pts) == 7 and why.startswith("budget spent (7 of 7")
    assert len(rounds[1]) == 1 and (rounds[1][0] > 64 and rounds[1][0] < 256)  # the crossing's gap first


def test_a_cell_that_fails_is_not_proposed_again():
    pts, rounds, why = search(make_measure(falling, 1, fail={64, 128}), 1, 256, budget=14, per_doubling=2)
    proposed = [c for r in rounds for c in r]
    assert len(proposed) == len(set(proposed)) and 64 not in pts and 128 not in pts
    assert why.startswith("stopped: concurrency") and "failed in this run" in why


def test_single_runs_use_the_tolerance_band():
    assert judge([104.0], [100.0], SPEEDUP_CONFIDENCE, 3.0)["verdict"] == FASTER
    assert judge([102.0], [100.0], SPEEDUP_CONFIDENCE, 3.0)["verdict"] == NO_DIFF
    assert judge([96.0], [100.0], SPEEDUP_CONFIDENCE, 3.0)["verdict"] == SLOWER
    j = judge([110.0, 111.0, 109.0], [100.0, 101.0, 99.0], SPEEDUP_CONFIDENCE, 3.0)
    assert j["verdict"] == FASTER and j["low"] < 1.1 < j["high"] and j["n"] == [3, 3]


def test_the_search_judges_a_point_as_the_report_does():
    """One rule (crossover.speedup_verdict, which results/measures.speedup_noise calls too): repeats
    whose interval excludes 1.00x still make no measurable difference inside the tolerance band, and
    a single run on one side is judged by the ratio of geometric means, the report's point."""
    import pandas as pd
    from specfleet.report.tables.measures import NoiseBand, speedup_noise
    tight = judge([101.0, 101.1, 100.9], [100.0, 100.1, 99.9], SPEEDUP_CONFIDENCE, 3.0)
    assert tight["low"] > 1.0 and tight["verdict"] == NO_DIFF   # 1.01x: inside the ±3 % band
    one = judge([103.2], [90.0, 110.0], SPEEDUP_CONFIDENCE, 3.0)  # arithmetic 1.032x, geometric 1.038x
    assert one["speedup"] == pytest.approx(103.2 / math.sqrt(90.0 * 110.0)) and one["verdict"] == FASTER
    # the report's verdicts on the same numbers (a campaign's runs, grouped by cell, config, node)
    def runs(values):
        return [SimpleNamespace(result=SimpleNamespace(output_throughput=v)) for v in values]
    rows = pd.DataFrame([{"cell": "c1", "config": "cfg", "node": "w1", "speedup": 1.0}])
    for cfg, base, j in (([101.0, 101.1, 100.9], [100.0, 100.1, 99.9], tight), ([103.2], [90.0, 110.0], one)):
        camp = SimpleNamespace(groups=lambda c=cfg, b=base: {("c1", "cfg", "w1"): runs(c), ("c1", "base", "w1"): runs(b)})
        assert speedup_noise(camp, rows, "base", NoiseBand(tolerance_pct=3.0)).speedup_verdict[0] == j["verdict"]


def test_next_points_on_hand_made_points():
    grid = fine_grid(1, 64, 1)  # 1 2 4 8 16 32 64
    p = lambda s, v: {"speedup": s, "verdict": v}  # noqa: E731
    pts = {1: p(2.0, FASTER), 4: p(1.5, FASTER), 16: p(1.01, NO_DIFF), 64: p(0.7, SLOWER)}
    todo, why = next_points(grid, coarse_grid(1, 64, 4), pts, budget=10)
    assert todo == [8, 32] and why == "refining"
    # only one cell left: the pair whose estimate crosses 1.00x goes first
    todo, _ = next_points(grid, coarse_grid(1, 64, 4), pts, budget=5)
    assert todo == [32]
    assert next_points(grid, coarse_grid(1, 64, 4), pts, budget=4) == ([], "budget spent (4 of 4 concurrencies measured)")


def test_the_spec_carries_the_grids_and_prompts_scaled_to_a_steady_state_only_when_asked():
    search = {"search": "crossover", "min": 1, "max": 32, "budget": 8}
    x = crossover_spec(plan_with(search, num_prompts=80, min_prompts_per_concurrency=5), ["vanilla", "ng"])
    assert x.grid == fine_grid(1, 32, 2) and x.coarse == coarse_grid(1, 32, 4) == [1, 4, 16, 32]
    assert x.prompts["8"] == 80 and x.prompts["23"] == 115
    lean = crossover_spec(plan_with(search, num_prompts=80, min_prompts_per_concurrency=5, steady_state="report-setup",
                                    prompts_that_do_not_fit="refuse"), ["vanilla", "ng"])
    assert set(lean.prompts.values()) == {80}


PLAN = {"campaign": "x", "model": {"name": "m", "candidates": ["/m"], "weights_gib": 1},
        "configurations": [{"name": "vanilla"},
                           {"name": "ng", "speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}],
        "baseline": "vanilla", "benchmark": {"dataset_path": "q.jsonl", "chat_template": "double"}}


def plan_with(conc, **bench):
    raw = copy.deepcopy(PLAN)
    raw["benchmark"].update(concurrencies=conc, **bench)
    return parse_plan(raw, "plans/x.yml")


def test_plan_search_syntax_gives_the_coarse_grid_and_reads_back():
    p = plan_with({"search": "crossover", "min": 1, "max": 256, "budget": 12})
    assert p.benchmark.concurrencies == [1, 4, 16, 64, 256]
    assert p.benchmark.concurrency_search.budget == 12
    again = parse_plan(p.model_dump(mode="json"), "again.yml")
    assert again.plan_hash() == p.plan_hash()
    assert plan_with({"search": "crossover", "max": 256, "budget": 13}).plan_hash() != p.plan_hash()


@pytest.mark.parametrize("conc,field,words", [
    ({"search": "crossover", "max": 256, "budget": 3}, "benchmark.concurrencies.budget", "fewer than the 5"),
    ({"search": "grid", "max": 256, "budget": 9}, "benchmark.concurrencies.search", "crossover"),
    ({"search": "crossover", "max": 256, "budget": 9, "coarse_factor": 3}, "benchmark.concurrencies.coarse_factor",
     "power of two"),
    ({"search": "crossover", "min": 8, "max": 4, "budget": 9}, "benchmark.concurrencies.max", "larger than min"),
    ({"search": "crossover", "max": 256}, "benchmark.concurrencies.budget", "is required"),
    ({"search": "crossover", "max": 256, "budget": 9, "bugdet": 1}, "benchmark.concurrencies.bugdet", "unknown field"),
])
def test_bad_search_is_one_line_naming_file_and_field(conc, field, words):
    with pytest.raises(PlanError) as e:
        plan_with(conc)
    msg = str(e.value)
    assert msg.startswith(f"plans/x.yml: field '{field}': ") and words in msg and "\n" not in msg


def test_search_field_is_written_one_way_only():
    raw = copy.deepcopy(PLAN)
    raw["benchmark"]["concurrency_search"] = {"search": "crossover", "max": 64, "budget": 9}
    with pytest.raises(PlanError, match="write `concurrencies: {search: crossover"):
        parse_plan(raw, "plans/x.yml")


def test_drop_with_scaled_prompts_is_refused():
    with pytest.raises(PlanError, match="field .benchmark.prompts_that_do_not_fit.: drop does not go with a crossover search"):
        plan_with({"search": "crossover", "max": 64, "budget": 9}, prompts_that_do_not_fit="drop")


# ---------------------------------------------------------------- the runner's rounds (fake vllm)
SEARCH = {"search": "crossover", "min": 1, "max": 32, "coarse_factor": 4, "per_doubling": 2, "budget": 8}


def run_files(bed):
    return {p.name: p.stat().st_mtime_ns for p in bed.run_dir.glob("*_conc*.json")}


def test_runner_refines_where_the_speedup_crosses_and_resume_measures_nothing_new(bed, monkeypatch):
    # ngram's throughput is (12 / c)^0.5 x vanilla's: 3.5x at c=1, 1.0x at c=12, 0.61x at c=32 (exact, no noise)
    monkeypatch.setenv("FAKE_CROSSOVER", "ngram:12")
    monkeypatch.setenv("FAKE_BENCH_S", "0.05")
    plan = bed.plan(benchmark={"concurrencies": SEARCH, "repeat": 2, "num_prompts": 8,
                               "min_prompts_per_concurrency": 0.5})
    spec = bed.spec(plan, queue=("vanilla", "ngram"))
    # a server start per repeat (server-start), in every round too: ~20 starts of the fake server
    assert bed.run(spec, timeout=400) == EXIT_OK, bed.log()
    st = bed.state()
    x = st["crossover"]["configs"]["ngram"]
    assert x["why"].startswith("done")
    measured = sorted(int(c) for c in x["points"])
    grid = fine_grid(1, 32, 2)  # 1 2 3 4 6 8 11 16 23 32
    assert measured[:0] == [] and {1, 4, 16, 32} <= set(measured) and len(measured) <= 8
    (a, b), = crossings({int(c): p for c, p in x["points"].items()})
    assert (a, b) == (11, 16) and grid.index(b) - grid.index(a) == 1
    # the refined cells were measured by the baseline too (same node), a server start per repeat
    for c in measured:
        for cfg in ("vanilla", "ngram"):
            for rep in (1, 2):
                res = json.loads((bed.run_dir / f"{cfg}_conc{c}_r{rep}.json").read_text())
                assert res["max_concurrency"] == c and res["num_prompts"] == max(8, math.ceil(0.5 * c))
                assert res["prompts_per_concurrency"] == f"{res['num_prompts'] / c:g}"
    rounds = [i for i in st["items"] if ".round" in i["name"]]
    assert rounds and all(i["status"] == "done" for i in rounds)
    assert {i["name"].split(".")[0] for i in rounds} == {"vanilla", "ngram"}
    # repeat_isolation server-start (the plan's default): a round's second repeats have their own items
    assert {i["name"] for i in rounds if i["name"].endswith(".r2")} == {
        i["name"] + ".r2" for i in rounds if not i["name"].endswith(".r2")}
    # every server of a configuration logs into its one server log, a header per start
    assert not list(bed.run_dir.glob("*.round*.server.log"))
    starts = (bed.run_dir / "ngram.server.log").read_text().count("==== specfleet ")
    # one start per queue item: the plan's repeats each on their own (server-start), then a round's
    assert starts == sum(i["name"].split(".")[0] == "ngram" for i in st["items"]) == 2 + len(
        [i for i in rounds if i["name"].startswith("ngram.round")])
    before = run_files(bed)
    # the second run: every cell is there, nothing is measured again, the decision is the same
    assert bed.run(spec, timeout=400) == EXIT_OK, bed.log()
    assert run_files(bed) == before
    st2 = bed.state()
    assert [i["name"] for i in st2["items"]] == ["vanilla", "ngram", "vanilla.r2", "ngram.r2"]
    assert st2["crossover"]["configs"]["ngram"]["points"] == x["points"]
    assert "done marker present: skipped" in bed.log()


def test_a_plan_without_a_search_keeps_its_hash():
    """The field is new: plans without it hash as before (results and done markers stay valid)."""
    from specfleet.plan import load_plan
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    import re
    documented = re.search(r"campaign=qwen3-32b-specdec\b", (root / "docs/campaign.md").read_text())
    assert documented  # docs/campaign.md §4 prints the report plan's command with its hash
    line = next(ln for ln in (root / "docs/campaign.md").read_text().splitlines() if "campaign=qwen3-32b-specdec " in ln)
    assert load_plan(root / "plans/qwen3-32b.yml").plan_hash() == re.search(r"plan_hash=(\w+)", line)[1]


# ---------------------------------------------------------------- metric: goodput (the highest load meeting the SLO)
GOODPUT_X = {"grid": fine_grid(1, 256, 2), "coarse": coarse_grid(1, 256, 4), "budget": 10, "metric": "goodput",
             "confidence": SPEEDUP_CONFIDENCE, "tolerance_pct": TOL, "baseline": "vanilla", "configs": ["eagle3"],
             "prompts": {str(c): 32 for c in fine_grid(1, 256, 2)},
             "slo": {"limits": {"tpot_ms": 50.0}, "attainment_pct": 90.0}, "repeat": 2, "output_len": 101,
             "server_per_repeat": False}
TPOT_S = {"vanilla": 0.020, "eagle3": 0.012}   # at no load; both grow as (1 + c / 32)


def write_cell(d, entry, cfg, rng):
    """A result file of 32 requests whose TPOT is TPOT_S[cfg] x (1 + c / 32) with 5 % noise per request."""
    c = entry.concurrency
    tpots = [TPOT_S[cfg] * (1 + c / 32) * math.exp(rng.gauss(0, 0.05)) for _ in range(32)]
    (d / entry.result_file).write_text(json.dumps({
        "duration": 10.0 + c / 8, "completed": 32, "ttfts": [0.1] * 32, "output_lens": [101] * 32,
        "errors": [""] * 32, "latencies": [0.1 + 100 * t for t in tpots], "output_throughput": 100.0}))


def test_goodput_search_finds_each_configurations_highest_concurrency_meeting_the_slo(tmp_path):
    rng = random.Random(4)
    from specfleet.campaign.commands import Paths
    from specfleet.campaign.spec import build_run_spec
    x = Crossover.from_json(GOODPUT_X)
    p = plan_with({"search": "crossover", "max": 64, "budget": 9, "metric": "goodput"}, slo={"tpot_ms": 50})
    base = build_run_spec(p, "w1", ["vanilla"], Paths(venv="/v", work_dir="/w"), run_id="r").items[0]
    queue = [replace(base, name=n, bench=[r for c in coarse_grid(1, 256, 4) for r in crossover._runs(x, n, c, 32)])
             for n in ("vanilla", "eagle3")]
    for it in queue:
        for e in it.bench:
            write_cell(tmp_path, e, it.name, rng)
    tried: dict = {}
    for round_no in range(1, 12):
        items, decision = crossover.crossover_round(x, queue, str(tmp_path), tried, round_no)
        if not items:
            break
        queue += items
        for it in items:
            for e in it.bench:
                write_cell(tmp_path, e, it.name.split(".")[0], rng)
    grid = fine_grid(1, 256, 2)
    assert set(decision) == {"eagle3", "vanilla"}   # the baseline's own boundary is searched too
    for cfg, d in decision.items():
        pts = {int(c): p for c, p in d["points"].items()}
        top = max(c for c, p in pts.items() if p["verdict"] == crossover.MEETS)
        above = grid[grid.index(top) + 1]
        # located within one grid step: the next fine-grid point was measured and misses
        assert pts[above]["verdict"] == crossover.MISSES and d["why"].startswith("done"), d["why"]
        assert all(p["verdict"] == crossover.MEETS for c, p in pts.items() if c <= top)
        # the true boundary (90 % of requests within 50 ms: TPOT x e^(1.28 x 0.05) <= 50 ms) lies there
        true = 32 * (0.050 / (TPOT_S[cfg] * math.exp(1.2816 * 0.05)) - 1)
        assert grid[grid.index(top) - 1] <= true <= grid[grid.index(above) + 1], (cfg, top, true)
        assert f"highest concurrency measured meeting the SLO: {top} (" in d["why"] and "Wilson" in d["why"]
        assert len(pts) <= GOODPUT_X["budget"]
    # at 256 no request is good on either side: goodput 0, no ratio and no log interval; attainment [0, 7.4 %]
    z = decision["eagle3"]["points"]["256"]
    assert z["goodput"] == 0 and z["speedup"] is None and z["low"] is None
    assert z["attainment_pct"] == 0 and z["attainment_low"] == 0 and 5 < z["attainment_high"] < 12
    # where both meet it, the goodput ratio has its log interval
    one = decision["eagle3"]["points"]["1"]
    assert one["low"] is not None and one["low"] <= one["speedup"] <= one["high"]


def test_goodput_search_needs_an_slo_and_the_arrays():
    goodput = {"search": "crossover", "max": 64, "budget": 9, "metric": "goodput"}
    with pytest.raises(PlanError, match="field .benchmark.concurrencies.metric.: goodput needs benchmark.slo"):
        plan_with(goodput)
    with pytest.raises(PlanError, match="field .benchmark.save_detailed.: a goodput search reads the per-request"):
        plan_with(goodput, slo={"tpot_ms": 50}, save_detailed=False)
    p = plan_with(goodput, slo={"tpot_ms": 50, "attainment_pct": 95})
    from specfleet.campaign.spec import crossover_spec
    x = crossover_spec(p, [c.name for c in p.configurations])
    assert x.metric == "goodput" and x.to_json()["slo"] == {"limits": {"tpot_ms": 50.0}, "attainment_pct": 95.0}
    assert "slo" not in crossover_spec(plan_with({"search": "crossover", "max": 64, "budget": 9}, slo={"tpot_ms": 50}),
                                       [c.name for c in p.configurations]).to_json()


@pytest.mark.parametrize("isolation", ["server-start", "cache-reset"])
def test_a_rounds_repeats_are_kept_apart_as_the_plans_are(tmp_path, isolation):
    """A round's result carries the plan's repeat_isolation, so the round keeps its repeats apart the
    same way: server-start = each repeat of each configuration its own item (its own server start),
    interleaved as the plan's (vanilla, ng, vanilla.r2, ng.r2); cache-reset = one item holding both."""
    from specfleet.campaign.commands import Paths
    from specfleet.campaign.spec import build_run_spec
    plan = plan_with({"search": "crossover", "min": 1, "max": 16, "budget": 6}, repeat=2, num_prompts=8,
                     repeat_isolation=isolation)
    spec = build_run_spec(plan, "w1", ["vanilla", "ng"], Paths(venv="/v", work_dir=str(tmp_path)), run_id="r")
    first = [(it.name, sorted({b.rep for b in it.bench})) for it in spec.items]
    assert first == ([("vanilla", [1]), ("ng", [1]), ("vanilla.r2", [2]), ("ng.r2", [2])]
                     if isolation == "server-start" else [("vanilla", [1, 2]), ("ng", [1, 2])])
    # round 1 measured: ng is 3x faster at 1, 0.5x at 4 and 16 (a crossing between 1 and 4, refined at 2)
    speed = {"vanilla": {1: 100, 4: 100, 16: 100}, "ng": {1: 300, 4: 50, 16: 50}}
    for it in spec.items:
        for b in it.bench:
            cfg = it.name.split(".")[0]
            (tmp_path / b.result_file).write_text(json.dumps(
                {"output_throughput": speed[cfg][b.concurrency] * (1 + b.rep / 100)}))
    items, decision = crossover.crossover_round(spec.crossover, spec.items, str(tmp_path), {}, 2)
    assert decision["ng"]["next"] == [2], decision
    got = [(it.name, [(b.concurrency, b.rep) for b in it.bench]) for it in items]
    if isolation == "server-start":
        assert got == [("vanilla.round2", [(2, 1)]), ("ng.round2", [(2, 1)]),
                       ("vanilla.round2.r2", [(2, 2)]), ("ng.round2.r2", [(2, 2)])]
    else:
        assert got == [("vanilla.round2", [(2, 1), (2, 2)]), ("ng.round2", [(2, 1), (2, 2)])]
    for it in items:   # each result says how its repeats were kept apart, and now it is so
        meta = dict(map(tuple, it.client.metadata))
        assert meta["repeat_isolation"] == isolation and it.log_name == it.name.split(".")[0]
    assert len({it.item_hash for it in items}) == len(items)
