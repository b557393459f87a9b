"""fab compare: two campaigns of real-shaped result files (compare_builder.py); eagle3 15 % slower in one
candidate, noise only in another."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from invoke.exceptions import Exit

from compare_builder import campaign, plan_raw
from specfleet.errors import UserError
from specfleet.exits import EXIT_ASSERTION, EXIT_REGRESSION, EXIT_UNDECIDABLE
from specfleet.report.tables.compare_policy import (IMPROVEMENT, NO_DIFF, REGRESSION, UNDECIDABLE, WITHIN, holm,
                                                    settle)
from specfleet.report.compare.comparison import PLAN_SNAPSHOT, cell_diff, compare_dirs
from specfleet.report.compare.compare_render import write_outputs
from specfleet.report.tables.measures import NoiseBand


@pytest.fixture
def base(tmp_path) -> Path:
    return campaign(tmp_path / "old", plan_raw(), seed=1)


def test_eagle3_fifteen_percent_slower_is_a_regression(tmp_path, base):
    cand = campaign(tmp_path / "new", plan_raw(vllm_version="0.32.0"), seed=2, scale={"eagle3": 0.85}, vllm="0.32.0")
    # the plan's gate metric (token-weighted TPOT: lower is better) and output tok/s say the same
    default = compare_dirs(base, cand)
    assert {(d.config, d.concurrency) for d in default.regressions} == {("eagle3", 1), ("eagle3", 16)}
    cmp = compare_dirs(base, cand, metric="output_throughput")
    reg = {(d.config, d.concurrency) for d in cmp.regressions}
    assert reg == {("eagle3", 1), ("eagle3", 16)}
    assert {(s.config, s.concurrency) for s in cmp.speedup_regressions} == {("eagle3", 1), ("eagle3", 16)}
    e16 = next(d for d in cmp.cells if d.config == "eagle3" and d.concurrency == 16)
    assert 0.80 < e16.ratio < 0.90 and e16.ci_high < 1 / 1.03 and (e16.n_base, e16.n_cand) == (3, 3)
    # the unchanged configurations are not called regressions
    assert all(d.verdict != REGRESSION for d in cmp.cells if d.config != "eagle3")
    # provenance first: the vLLM version differs; the plan differs only in what is compared
    assert ("vllm", "0.31.0", "0.32.0") in cmp.provenance
    assert [k for k, *_ in cmp.plan_compared] == ["vllm_version"] and cmp.plan_other == []
    # the candidate's plan asserts eagle3 >= 1.7x at c=16: 1.83 x 0.85 = 1.56 fails
    assert [a.state for a in cmp.assertions] == ["FAILED"]


def test_noise_only_rerun_has_no_regression(tmp_path, base):
    cand = campaign(tmp_path / "new", plan_raw(), seed=3)
    cmp = compare_dirs(base, cand)
    assert len(cmp.cells) == 8 * 3 and cmp.regressions == [] and cmp.speedup_regressions == []
    assert {d.verdict for d in cmp.cells} <= {NO_DIFF, WITHIN}
    assert [a.state for a in cmp.assertions] == ["passed"]
    assert cmp.plan_compared == [] and cmp.plan_other == []


def test_other_plan_differences_are_named(tmp_path, base):
    raw = plan_raw(**{"benchmark.output_len": 256, "server.args": ["--max-model-len", "4096"]})
    cmp = compare_dirs(base, campaign(tmp_path / "new", raw, seed=4))
    assert [k for k, *_ in cmp.plan_compared] == ["server.args"]
    assert [k for k, *_ in cmp.plan_other] == ["benchmark.output_len"]


def test_other_model_refused_unless_forced(tmp_path, base):
    cand = campaign(tmp_path / "new", plan_raw(**{"model.name": "Qwen/Qwen3-8B"}), seed=5)
    with pytest.raises(UserError, match=r"different models: Qwen/Qwen3-32B \(baseline\) vs Qwen/Qwen3-8B.*--force"):
        compare_dirs(base, cand)
    cmp = compare_dirs(base, cand, force=True)
    assert cmp.forced
    paths = write_outputs(cmp, tmp_path / "out")
    assert "FORCED: compared with --force although different models" in paths["md"].read_text()


def test_other_dataset_refused(tmp_path, base):
    cand = campaign(tmp_path / "new", plan_raw(**{"benchmark.dataset_path": "other.jsonl"}), seed=6)
    with pytest.raises(UserError, match="different datasets"):
        compare_dirs(base, cand)


def _decide(metric, a, b, noise, single_run_threshold=False):
    d, f = cell_diff(("c", "conc1"), 1, metric, a, b, noise)
    settle([f], noise, single_run_threshold)
    return d


def test_decide_rules():
    noise = NoiseBand(3.0)
    # lower is better for TPOT: 10 % higher TPOT is a regression
    assert _decide("mean_tpot_ms", [10.0, 10.1, 9.9], [11.0, 11.1, 10.9], noise).verdict == REGRESSION
    assert _decide("output_throughput", [10.0, 10.1, 9.9], [11.0, 11.1, 10.9], noise).verdict == IMPROVEMENT
    # measurably slower (interval excludes 1) but inside the band
    assert _decide("output_throughput", [100.0, 100.1, 99.9], [99.0, 99.1, 98.9], noise).verdict == WITHIN
    # single runs: no noise estimate, no test: undecidable, unless the plain threshold is accepted
    r = _decide("output_throughput", [100.0], [96.0], noise)
    assert r.verdict == UNDECIDABLE and r.ci_low is None and "single run" in r.method
    assert r.judged.p_worse is None and r.judged.detectable_pct is None
    assert _decide("output_throughput", [100.0], [96.0], noise, True).verdict == REGRESSION
    assert _decide("output_throughput", [100.0], [98.0], noise, True).verdict == NO_DIFF


def test_holm_adjusts_as_published():
    # Holm (1979) step-down: sorted p x (m - rank), running maximum, capped at 1
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_throughput_halved_and_ttft_100x_at_equal_tpot_is_a_regression(tmp_path, base):
    """Issue 39: a --max-num-seqs change halves vanilla's c=16 throughput and multiplies its TTFT by 100
    at an unchanged TPOT; the plan's gate metric (token-weighted TPOT) alone saw nothing."""
    cand = campaign(tmp_path / "new", plan_raw(), seed=2,
                    fields={("vanilla", 16): {"output_throughput": 0.52, "total_token_throughput": 0.52,
                                              "mean_ttft_ms": 100.0}})
    cmp = compare_dirs(base, cand)
    assert {(d.config, d.concurrency, d.metric) for d in cmp.regressions} == {
        ("vanilla", 16, "output_throughput"), ("vanilla", 16, "mean_ttft_ms")}
    assert cmp.metrics == ["output_throughput", "mean_ttft_ms", "tpot_weighted_ms"]
    tpot = next(d for d in cmp.cells if (d.config, d.concurrency, d.metric) == ("vanilla", 16, "tpot_weighted_ms"))
    assert tpot.verdict in (NO_DIFF, WITHIN)
    # the family: 8 cells x 3 metrics + 6 speedups, every figure with its Holm p and its power
    assert cmp.family == 30 and all(d.judged.p_adjusted is not None and d.judged.detectable_pct > 3 for d in cmp.cells)
    assert _fab_compare(base, cand, ("fail_on", "regression")) == EXIT_REGRESSION
    # --metric narrows it: on the per-token metric alone this candidate passes (what used to be the default)
    assert compare_dirs(base, cand, metric="tpot_weighted_ms").regressions == []
    assert _fab_compare(base, cand, ("fail_on", "regression"), ("metric", "tpot_weighted_ms")) == 0
    md = write_outputs(cmp, tmp_path / "out")["md"].read_text()
    assert "family-wise false-alarm rate <= 5 % over 30 tested figure(s)" in md
    assert "## Per cell: TTFT ms, candidate / baseline" in md and "detectable worsening" in md


def test_single_run_campaigns_of_noise_are_undecidable_never_silent(tmp_path):
    """Two single-run campaigns of pure 2 % noise: the plain threshold would call ~15 % of figures a
    regression; without a test they are UNDECIDABLE, with their own exit code, unless the user accepts
    the plain threshold, whose false-alarm rate the output then states."""
    raw = plan_raw(**{"benchmark.repeat": 1})
    raw["assertions"] = []
    a = campaign(tmp_path / "a", raw, seed=11, noise=0.02, repeats=1)
    b = campaign(tmp_path / "b", raw, seed=12, noise=0.02, repeats=1)
    cmp = compare_dirs(a, b)
    # vanilla ran on both nodes (2 runs a side): tested; every other cell and every speedup: one run
    assert cmp.regressions == [] and cmp.family == 2 * 3 and len(cmp.undecidable) == 6 * 3 + 6
    assert {d.verdict for d in cmp.cells if d.config != "vanilla"} == {UNDECIDABLE}
    lines = write_outputs(cmp, tmp_path / "out")["md"].read_text()
    assert "UNDECIDABLE: 1 RUN: 24 figure(s) have one run on a side" in lines
    assert _fab_compare(a, b, ("fail_on", "regression")) == EXIT_UNDECIDABLE
    assert _fab_compare(a, b) == 0          # without --fail-on nothing gates
    accepted = compare_dirs(a, b, single_run_threshold=True)
    assert all(d.verdict != UNDECIDABLE for d in accepted.cells)
    md = write_outputs(accepted, tmp_path / "acc")["md"].read_text()
    # the stated rate: at 2 % noise and a 3 % band, 14.8 % per figure
    assert "plain threshold on single runs" in md and "at 2 % run noise 14.8 % per figure" in md


def test_outputs_carry_plot_and_simulated_stamp(tmp_path, base):
    raw = plan_raw()
    cand = campaign(tmp_path / "new", raw, seed=7, scale={"eagle3": 0.85})
    for f in cand.glob("w2/eagle3_*.json"):  # one simulated input stamps the whole comparison
        d = json.loads(f.read_text())
        d["simulated"] = True
        f.write_text(json.dumps(d))
    paths = write_outputs(compare_dirs(base, cand), tmp_path / "out")
    assert "SIMULATED ENGINE" in paths["md"].read_text() and "![candidate vs baseline](compare.svg)" in paths["md"].read_text()
    page = paths["html"].read_text()
    assert "<svg" in page and "SIMULATED ENGINE: not a measurement" in page and "REGRESSION" in page
    data = json.loads(paths["json"].read_text())
    assert data["simulated"] and any(c["verdict"] == REGRESSION for c in data["cells"])


def _fab_compare(base: Path, cand: Path, *extra: str) -> int:
    from specfleet.tasks import ns
    from invoke import Context
    body = ns["compare"].body
    kw = {"baseline": str(base), "candidate": str(cand), "out": str(cand.parent / "cmp"), **dict(extra)}
    try:
        body(Context(), **kw)
    except Exit as e:
        return e.code
    return 0


def test_fail_on_regression_exit_codes(tmp_path, base):
    slow = campaign(tmp_path / "slow", plan_raw(), seed=8, scale={"eagle3": 0.85})
    same = campaign(tmp_path / "same", plan_raw(), seed=9)
    raw = plan_raw()
    raw["assertions"] = []
    quiet = campaign(tmp_path / "quiet", raw, seed=8, scale={"eagle3": 0.85})
    assert _fab_compare(base, slow, ("fail_on", "regression")) == EXIT_REGRESSION | EXIT_ASSERTION
    assert _fab_compare(base, quiet, ("fail_on", "regression")) == EXIT_REGRESSION
    assert _fab_compare(base, quiet) == 0            # without --fail-on a regression is reported, not an exit code
    assert _fab_compare(base, same, ("fail_on", "regression")) == 0


def test_no_snapshot_is_said(tmp_path, base):
    cand = campaign(tmp_path / "new", plan_raw(), seed=10)
    (cand / PLAN_SNAPSHOT).unlink()
    cmp = compare_dirs(base, cand)
    assert any("no plan.json" in n and "not checked" in n for n in cmp.notes)


# ------------------------------------------------------------------ goodput under an SLO (comparison.py)
SLO = {"tpot_ms": 50, "attainment_pct": 90}


def with_requests(d: Path, slow: dict[tuple[str, str], int]) -> Path:
    """Per-request arrays in every result file: 16 requests at TPOT 40 ms, of which slow[(config, cell)]
    at 60 ms (over the SLO's 50 ms); vLLM's own figures are left as they are."""
    for f in d.glob("w*/*_conc*_r*.json"):
        r = json.loads(f.read_text())
        cfg, cell = f.name.split("_")[0], f.name.split("_")[1]
        k = slow.get((cfg, cell), 0)
        tpots = [0.06] * k + [0.04] * (16 - k)
        r.update(ttfts=[0.1] * 16, output_lens=[101] * 16, errors=[""] * 16,
                 latencies=[0.1 + 100 * t for t in tpots])
        f.write_text(json.dumps(r))
    return d


def test_goodput_and_attainment_compared_when_both_plans_have_an_slo(tmp_path):
    raw = plan_raw(**{"benchmark.slo": SLO})
    base = with_requests(campaign(tmp_path / "old", raw, seed=1), {})
    # throughput unchanged; under the SLO eagle3 at c=16 keeps 8 of 16 requests, ngram at c=1 none
    cand = with_requests(campaign(tmp_path / "new", raw, seed=2), {("eagle3", "conc16"): 8, ("ngram", "conc1"): 16})
    cmp = compare_dirs(base, cand, metric="output_throughput")   # (the TPOT metrics see the slow requests too)
    assert cmp.regressions == [] and cmp.speedup_regressions == [] and "TPOT <= 50 ms" in cmp.slo
    g = {(x.config, x.concurrency): x for x in cmp.goodput}
    assert len(g) == 8
    e16 = g[("eagle3", 16)]
    assert e16.verdict == REGRESSION and e16.ci_high < 1 / 1.03 and 0.45 < e16.ratio < 0.55   # 8/16 of the goodput
    assert e16.attainment_verdict == REGRESSION and e16.base_attainment_pct == 100 and e16.cand_attainment_pct == 50
    assert e16.attainment_high_pp < -3 and e16.base_meets and not e16.cand_meets
    # goodput 0 in every run: no log interval, judged on attainment (0 % of 48 vs 100 % of 48), said so
    n1 = g[("ngram", 1)]
    assert n1.cand_goodput == 0 and n1.ci_low is None and "attainment" in n1.method
    assert n1.verdict == REGRESSION and n1.attainment_low_pp == -100 and -95 < n1.attainment_high_pp < -85
    assert {(x.config, x.concurrency) for x in cmp.goodput_regressions} == {("eagle3", 16), ("ngram", 1)}
    assert all(x.verdict in (NO_DIFF, WITHIN) and x.attainment_verdict == NO_DIFF for k, x in g.items()
               if k not in (("eagle3", 16), ("ngram", 1)))
    paths = write_outputs(cmp, tmp_path / "out")
    md = paths["md"].read_text()
    assert "## Goodput under the SLO, candidate / baseline" in md and "Newcombe" in md
    assert "REGRESSION: eagle3 @ conc16 under the SLO" in md
    data = json.loads(paths["json"].read_text())
    assert sum(x["regressed"] for x in data["goodput"]) == 2 and data["slo"].startswith("TPOT <= 50 ms")
    # --fail-on regression covers it: throughput alone has no regression here
    raw["assertions"] = []
    quiet = with_requests(campaign(tmp_path / "quiet", raw, seed=2), {("eagle3", "conc16"): 8})
    assert _fab_compare(base, quiet, ("fail_on", "regression"), ("metric", "output_throughput")) == EXIT_REGRESSION
    same = with_requests(campaign(tmp_path / "same", raw, seed=3), {})
    assert _fab_compare(base, same, ("fail_on", "regression")) == 0


def test_goodput_not_compared_without_an_slo_on_both_sides(tmp_path, base):
    cand = with_requests(campaign(tmp_path / "new", plan_raw(**{"benchmark.slo": SLO}), seed=2), {})
    cmp = compare_dirs(with_requests(base, {}), cand)
    assert cmp.goodput == [] and any("only the candidate's plan has benchmark.slo" in n for n in cmp.notes)
    # another SLO on the baseline's side: both judged by the candidate's, and said so
    other = with_requests(campaign(tmp_path / "other", plan_raw(**{"benchmark.slo": {"tpot_ms": 45}}), seed=4), {})
    cmp = compare_dirs(other, cand)
    assert len(cmp.goodput) == 8 and any("SLOs differ" in n and "candidate's" in n for n in cmp.notes)


def test_proportion_intervals_match_newcombe():
    from specfleet.report.compare.comparison import proportion_difference
    from specfleet.worker.stats import wilson_interval
    # Newcombe (1998), Stat. Med. 17:857 and 873: 15/148 -> [0.0624, 0.1605]; 56/70 - 48/80 -> [0.0524, 0.3339]
    assert wilson_interval(15, 148, 0.95) == pytest.approx((0.0624, 0.1605), abs=5e-5)
    d, lo, hi = proportion_difference(48, 80, 56, 70, 0.95)
    assert d == pytest.approx(0.2) and (lo, hi) == pytest.approx((0.0524, 0.3339), abs=5e-5)
    lo0, hi0 = wilson_interval(0, 16, 0.95)
    assert lo0 == 0 and 0.19 < hi0 < 0.20   # defined at 0 %, where a log interval is not


def _server_logs(camp: Path, speculative: dict[str, str]) -> None:
    """Each host's <config>.server.log with one start line, as the runner writes it."""
    for host in (d for d in camp.iterdir() if d.is_dir()):
        for cfg, text in speculative.items():
            argv = f"/v/bin/vllm serve /m --served-model-name bench --port 8000 --speculative-config {text}"
            (host / f"{cfg}.server.log").write_text(f"==== specfleet 2026-12-03T07:11:10Z run r1: {argv}\n")


def test_a_speculative_config_spelled_with_other_key_order_is_the_same(tmp_path, base):
    """The worker of issue 22 records --speculative-config with sorted keys, the bastion before it in the
    plan's order (seen on the H200, docs/engines-gpu.md): fab compare does not call that a difference;
    another value is one."""
    _server_logs(base, {"ngram": '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":2,"prompt_lookup_max":128}'})
    cand = campaign(tmp_path / "new", plan_raw(), seed=3)
    _server_logs(cand, {"ngram": '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":128,"prompt_lookup_min":2}'})
    assert "speculative_config" not in [k for k, *_ in compare_dirs(base, cand).provenance]
    _server_logs(cand, {"ngram": '{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":128,"prompt_lookup_min":2}'})
    diffs = {k: (a, b) for k, a, b in compare_dirs(base, cand).provenance}
    assert "speculative_config" in diffs and '"num_speculative_tokens":5' in diffs["speculative_config"][1]


def test_hostile_plan_snapshot_out_file_and_dropped_runs_are_said_not_a_crash(tmp_path, base):
    """fab compare crashed on a nesting-bomb plan.json (RecursionError) and on --out naming a file
    (FileExistsError); a result file it could not use was dropped without a word."""
    cand = campaign(tmp_path / "new", plan_raw(), seed=10)
    bad = sorted((cand / "w1").glob("vanilla_conc16_r*.json"))[0]
    bad.write_text(bad.read_text()[:200])  # truncated: not merged
    cmp = compare_dirs(base, cand)
    assert any(n.startswith(f"candidate: left out: {bad}: invalid JSON") for n in cmp.notes), cmp.notes
    from specfleet.report.compare.compare_render import summary
    assert any(str(bad) in line for line in summary(cmp))
    out_file = tmp_path / "taken"
    out_file.write_text("mine\n")
    from specfleet.tasks import ns
    from invoke import Context
    with pytest.raises(Exit) as e:  # fab's own one line and exit 1, not a FileExistsError (exit 70)
        ns["compare"].body(Context(), baseline=str(base), candidate=str(cand), out=str(out_file))
    assert e.value.code == 1 and e.value.message == f"error: --out {out_file}: an existing file, not a folder " \
        "(compare.md, .html, .json go in a folder)"
    assert out_file.read_text() == "mine\n"
    (cand / PLAN_SNAPSHOT).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UserError, match=f"{cand / PLAN_SNAPSHOT}: unreadable plan snapshot .*nested 100000 levels"):
        compare_dirs(base, cand)


def test_compare_power_benchmark_runs_the_shipped_policy():
    """benchmarks/compare_power.py, small: a 30 % drop at 1 % noise and 3 runs is found in a family of
    24; pure noise on single runs is never a regression by default (undecidable), and the plain
    threshold's false alarms are what compare_policy states."""
    import importlib.util
    import random
    spec = importlib.util.spec_from_file_location("compare_power", Path(__file__).resolve().parents[2]
                                                  / "benchmarks" / "compare_power.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rng = random.Random("test-compare-power")
    for _ in range(5):
        false, found, stated, undecidable = mod.one_trial(0.01, 3, (0.30,), rng)
        assert found == [True] and not undecidable and 3 < stated[0] < 20
        false, found, _, undecidable = mod.one_trial(0.05, 1, (), rng)
        assert undecidable and not false
    plain = sum(mod.one_trial(0.02, 1, (), rng, figures=4, single_run_threshold=True)[0] for _ in range(200)) / 200
    from specfleet.report.tables.compare_policy import single_run_false_alarm
    assert abs(plain - single_run_false_alarm(3.0, 0.02, 4)[1]) < 0.1   # stated 47 %


# ------------------------------------------------------------------ open-loop (request-rate) cells
def with_rate_cells(d: Path, tpot_factor: float = 1.0, duration: float | None = None) -> Path:
    """A conc16-rate4 cell beside every conc16 one: the same files at a set rate of 4 req/s, output tok/s
    left as it is (the offered load), TPOT and ITL x tpot_factor, the run's duration set."""
    for f in list(d.glob("w*/*_conc16_r*.json")):
        r = json.loads(f.read_text())
        r.update(request_rate=4.0, burstiness=1.0, max_concurrency=None,
                 mean_tpot_ms=r["mean_tpot_ms"] * tpot_factor, mean_itl_ms=r["mean_itl_ms"] * tpot_factor)
        r["duration"] = duration or r["duration"]
        r.pop("start_times", None), r.pop("latencies", None)  # the c=1 fixture's arrays: not these arrivals
        f.with_name(f.name.replace("_conc16_", "_conc16-rate4_")).write_text(json.dumps(r))
    return d


def test_open_loop_cells_are_judged_on_latency_and_their_rate_is_checked(tmp_path, base):
    """Issue 39: at a set rate output tok/s is the offered load (~1.00x whatever the speed): a candidate
    30 % slower per token at equal throughput is a regression on TPOT there, and no throughput verdict
    is given; a side whose run took far longer than its arrivals says it did not sustain the rate."""
    with_rate_cells(base)
    cand = with_rate_cells(campaign(tmp_path / "new", plan_raw(), seed=2), tpot_factor=1.3, duration=60.0)
    cmp = compare_dirs(base, cand)
    rate = [d for d in cmp.cells if d.cell == "conc16-rate4"]
    assert {d.metric for d in rate} == {"mean_ttft_ms", "tpot_weighted_ms"}
    assert {(d.config, d.metric) for d in cmp.regressions} == {(c, "tpot_weighted_ms") for c in
                                                               ("vanilla", "ngram", "ngram_improved", "eagle3")}
    assert all(d.cell == "conc16-rate4" for d in cmp.regressions)
    # the report's speedup of a rate cell is per token (both sides equally slower: unchanged)
    assert all(s.verdict != REGRESSION for s in cmp.speedups)
    row = {(r[0], r[1]): r for r in cmp.rates}[("vanilla", "conc16-rate4")]
    assert row[3] == "6 of 6 runs" and "NOT SUSTAINED" in row[5] and row[4].endswith("of 4 req/s")
    assert any("did not sustain its offered rate" in n for n in cmp.notes)
    md = write_outputs(cmp, tmp_path / "out")["md"].read_text()
    assert "## Open-loop cells: offered vs achieved rate" in md


def test_rate_check_and_the_reports_open_loop_speedup(tmp_path):
    from specfleet.report.tables.measures import rate_check
    from specfleet.resultfile.schema import Result
    base = dict(duration=30.0, completed=16, failed=0, output_throughput=100.0, total_token_throughput=120.0,
                mean_ttft_ms=100.0, mean_tpot_ms=50.0, mean_itl_ms=50.0, total_output_tokens=16 * 101,
                request_rate=4.0, burstiness=1.0)
    ok = rate_check(Result(**base))          # span <= 15/4 x 1.52 = 5.7 s, one request 5 s: 10.7 s
    assert ok and not ok.sustained and "NOT SUSTAINED" in ok.describe()
    fine = rate_check(Result(**dict(base, duration=9.0)))
    assert fine.sustained and fine.achieved == pytest.approx(16 / 9.0)
    measured = rate_check(Result(**dict(base, duration=9.0, start_times=[i * 0.25 for i in range(16)],
                                        latencies=[5.0] * 16)))
    assert measured.sustained and measured.expected_s == pytest.approx(3.75 + 5.0)
    capped = rate_check(Result(**dict(base, duration=9.0, max_concurrency=4)))
    assert capped.capped == 4
    assert rate_check(Result(**dict(base, request_rate=float("inf")))) is None


def test_metric_narrowed_to_throughput_says_open_loop_cells_are_not_judged(tmp_path, base):
    with_rate_cells(base)
    cand = with_rate_cells(campaign(tmp_path / "new", plan_raw(), seed=2))
    cmp = compare_dirs(base, cand, metric="output_throughput")
    assert not any(d.cell == "conc16-rate4" for d in cmp.cells)
    assert any(u.startswith("open-loop cell(s) conc16-rate4 not judged: --metric names only throughput")
               for u in cmp.unmatched)


def test_hostile_names_and_worker_strings_are_shown_as_text(tmp_path, base):
    """A campaign folder's name and a worker's strings (here the speculative config of its server log)
    reach compare.md and compare.html through the report's templates: HTML escaped, Markdown's HTML as
    text, a pipe or newline kept inside its table cell or line, a terminal's escape codes visible."""
    hostile = "x<img src=x onerror=alert(1)>|\x1b[31m\nred"
    cand = campaign(tmp_path / "new", plan_raw(), seed=3)
    cand = cand.rename(cand.with_name(hostile))
    _server_logs(base, {"ngram": '{"method":"ngram"}'})
    _server_logs(cand, {"ngram": '{"method":"<script>alert(1)</script>|\x1b[2J"}'})
    paths = write_outputs(compare_dirs(base, cand), tmp_path / "out")
    md, page = paths["md"].read_text(), paths["html"].read_text()
    assert "\x1b" not in md + page and "\\x1b[31m" in md and "\\x1b[2J" in page
    assert "<img" not in md + page and "<script" not in md + page
    assert "&lt;img src=x onerror=alert(1)>" in md and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert md.splitlines()[0] == "# Campaign comparison: demo -> x&lt;img src=x onerror=alert(1)>\\|\\x1b[31m red"
    row = next(line for line in md.splitlines() if line.startswith("| speculative_config |"))
    assert row.count(" | ") == 2 and "&lt;script>alert(1)&lt;/script>\\|\\x1b[2J" in row
    assert "{&#34;method&#34;:&#34;&lt;script&gt;alert(1)&lt;/script&gt;|\\x1b[2J&#34;}</td>" in page
