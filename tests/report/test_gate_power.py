"""The gate policy's error rates (issue 23): benchmarks/gate_power.py's simulation, small, and the
report's gate giving the same decision as the simulated one on written files."""
from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

from specfleet.report.scan.folder import scan_folder
from specfleet.report.gates.gate import EquivalenceRule, check_equivalence, decide
from specfleet.report.gates.gate_policy import token_weighted_tpot
from specfleet.resultfile.schema import load_result

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "tests/fixtures/vllm-0.26.0-cuda-h200/h200-smollm2/h200"


def _bench():
    spec = importlib.util.spec_from_file_location("gate_power", ROOT / "benchmarks/gate_power.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rate(mod, sigma, diff, trials=150):
    rng = random.Random(f"test-{sigma}-{diff}")
    return sum(mod.one_trial(EquivalenceRule(), sigma, diff, rng)[0] for _ in range(trials)) / trials


def test_identical_nodes_pass_and_four_percent_apart_do_not_at_one_and_two_percent_noise():
    mod = _bench()
    for sigma in (0.01, 0.02):
        assert _rate(mod, sigma, 0.0) >= 0.92, sigma   # the benchmark's 400 trials: >= 0.95
        assert _rate(mod, sigma, 0.04) <= 0.05, sigma


def _write_repeats(root: Path, host: str, factors: list[float]) -> None:
    """The real H200 baseline at c=16, its ITLs scaled per repeat (token-weighted TPOT x factor)."""
    d = json.loads((H200 / "vanilla_conc16.json").read_text())
    (root / host).mkdir(parents=True)
    (root / host / "vanilla.done").write_text("")
    for k, f in enumerate(factors, 1):
        x = dict(d, node=host, itls=[[v * f for v in row] for row in d["itls"]], repeat_isolation="server-start")
        (root / host / f"vanilla_conc16_r{k}.json").write_text(json.dumps(x))


def test_the_reports_gate_decides_as_the_simulation_on_token_weighted_tpot(tmp_path):
    base = token_weighted_tpot(load_result(H200 / "vanilla_conc16.json"))
    a, b = [1.0, 1.004, 0.997], [1.002, 0.999, 1.006]
    _write_repeats(tmp_path / "c", "w1", a)
    _write_repeats(tmp_path / "c", "w2", b)
    g = check_equivalence(scan_folder(tmp_path / "c"), EquivalenceRule())
    [c] = g.checks
    ref = decide(EquivalenceRule(), [base * f for f in a], [base * f for f in b])
    assert c.state == ref.state and abs(c.ci_low - ref.ci_low) < 1e-12 and abs(c.ci_high - ref.ci_high) < 1e-12
    assert c.state == "PASSED" and g.verdict == "PASSED"
    # the metric is the token-weighted TPOT from the per-request arrays, not vLLM's unweighted mean
    assert abs(c.mean_a - base * sum(a) / 3) < 1e-9 and abs(c.mean_a - 3.8100150533756105) > 0.03


def test_four_percent_apart_with_three_runs_is_inconclusive_with_the_runs_to_add(tmp_path):
    _write_repeats(tmp_path / "c", "w1", [1.0, 1.004, 0.997])
    _write_repeats(tmp_path / "c", "w2", [1.04, 1.036, 1.046])
    g = check_equivalence(scan_folder(tmp_path / "c"), EquivalenceRule())
    assert not g.passed and g.verdict.startswith("INCONCLUSIVE: the data can show equivalence only within ±")
    assert "2 more run(s) of the baseline per node" in g.verdict


def test_a_gap_at_another_concurrency_is_a_named_warning(tmp_path):
    from campaign_builder import REPORT, write_campaign
    data = dict(REPORT)
    out, total, tpot, ttft, itl, dur = data[("w2", "vanilla", 1)]
    data[("w2", "vanilla", 1)] = (out / 1.06, total / 1.06, tpot * 1.06, ttft, itl * 1.06, dur * 1.06)  # 6 % at c=1
    g = check_equivalence(scan_folder(write_campaign(tmp_path / "c", data)), EquivalenceRule())
    assert g.passed  # the rule's point (c=16) decides the merge
    [w] = [n for n in g.notes if n.startswith("WARNING: w1 vs w2 at concurrency 1 (not the rule's point)")]
    assert "+6.16 %" in w and "INCONCLUSIVE" in w  # 47.01 x 1.06 vs 46.94 ms
    # issue 39: the gate table's own rows at c=1 say it, where the verdict column used to stay empty
    t = g.table
    c1 = t[(t.concurrency == 1) & (t.metric == "output tok/s")].iloc[0]
    assert round(c1.diff_pct, 2) == -5.84 and c1.verdict.startswith("NOTE: -5.84 % beyond ±3 %")
    assert "not the gate's point" in c1.verdict
    assert (t[(t.concurrency == 16)].verdict.str.startswith("NOTE") == False).all()  # noqa: E712  equal at c=16


def test_shared_server_starts_keep_the_stated_error_rate():
    """Issue 39: with repeat_isolation cache-reset a node's repeats share one server start; TOST took them
    as independent, so a true 3 % gap passed 22-25 % at the H200's spreads. Simulated through the shipped
    decide(): runs sharing a start count once, so a gap at or beyond the margin passes <= alpha for either
    repeat model, at the H200's measured spreads and at a start spread above the run noise."""
    mod = _bench()
    rule = EquivalenceRule()
    for sigma, start in ((0.0075, 0.0052), (0.005, 0.01)):
        for iso in ("cache-reset", "server-start"):
            # 3 % is the margin itself, where the bound is alpha with equality: 0.07 leaves room for the
            # sampling error of 200 trials (sd ~1.5 %); the old gate passed 22-25 % there (cache-reset)
            for diff, most in ((0.03, 0.07), (0.04, 0.05)):
                rng = random.Random(f"shared-{sigma}-{start}-{iso}-{diff}")
                res = [mod.one_trial(rule, sigma, diff, rng, start, iso) for _ in range(200)]
                assert sum(p for p, _, _ in res) / len(res) <= most, (sigma, start, iso, diff)
    # identical nodes on one start each: merged (UNVERIFIED), not refused
    rng = random.Random("shared-identical")
    res = [mod.one_trial(rule, 0.0075, 0.0, rng, 0.0052, "cache-reset") for _ in range(100)]
    assert all(st in ("PASSED", "UNVERIFIED") for _, _, st in res)


def test_tight_repeats_on_one_server_start_verify_nothing(tmp_path):
    """Three cache-reset repeats per node, 2 % apart with 0.1 % spread: TOST on them claimed PASSED; one
    start per node is one sample, so the gate says UNVERIFIED and names the server starts."""
    for host, fs in (("w1", [1.0, 1.001, 0.999]), ("w2", [1.02, 1.021, 1.019])):
        _write_repeats(tmp_path / "c", host, fs)
        for f in (tmp_path / "c" / host).glob("vanilla_conc16_r*.json"):
            d = json.loads(f.read_text())
            d["repeat_isolation"] = "cache-reset"
            f.write_text(json.dumps(d))
    g = check_equivalence(scan_folder(tmp_path / "c"), EquivalenceRule())
    [c] = g.checks
    assert c.state == "UNVERIFIED" and (c.n_a, c.n_b, c.runs_a, c.runs_b) == (1, 1, 3, 3)
    assert "single server start (its runs share it, one sample)" in c.reason
    assert "n=1/1 server starts of 3/3 runs (runs sharing a start count once)" in c.reason
    assert g.verdict.startswith("PASSED (UNVERIFIED: a single server start on a node")
    assert "the unit is the server start" in g.rule.describe()
    # two gate runs on starts of their own (fab bench --gate-runs 5): three samples per node, a real test
    for host, f5 in (("w1", [1.002, 0.998]), ("w2", [1.022, 1.018])):
        d = json.loads((tmp_path / "c" / host / "vanilla_conc16_r1.json").read_text())
        for k, f in zip((4, 5), f5):
            x = dict(d, repeat_isolation="server-start", itls=[[v * f for v in row] for row in d["itls"]])
            (tmp_path / "c" / host / f"vanilla_conc16_r{k}.json").write_text(json.dumps(x))
    [c] = check_equivalence(scan_folder(tmp_path / "c"), EquivalenceRule()).checks
    assert (c.n_a, c.runs_a) == (3, 5) and c.ci_low is not None
