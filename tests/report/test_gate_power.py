"""The gate policy's error rates (issue 23): benchmarks/gate_power.py's simulation, small, and the
report's gate giving the same decision as the simulated one on written files."""
from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

from specfleet.report.scan.folder import scan_campaign
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
        x = dict(d, node=host, itls=[[v * f for v in row] for row in d["itls"]])
        (root / host / f"vanilla_conc16_r{k}.json").write_text(json.dumps(x))


def test_the_reports_gate_decides_as_the_simulation_on_token_weighted_tpot(tmp_path):
    base = token_weighted_tpot(load_result(H200 / "vanilla_conc16.json"))
    a, b = [1.0, 1.004, 0.997], [1.002, 0.999, 1.006]
    _write_repeats(tmp_path / "c", "w1", a)
    _write_repeats(tmp_path / "c", "w2", b)
    g = check_equivalence(scan_campaign(tmp_path / "c"), EquivalenceRule())
    [c] = g.checks
    ref = decide(EquivalenceRule(), [base * f for f in a], [base * f for f in b])
    assert c.state == ref.state and abs(c.ci_low - ref.ci_low) < 1e-12 and abs(c.ci_high - ref.ci_high) < 1e-12
    assert c.state == "PASSED" and g.verdict == "PASSED"
    # the metric is the token-weighted TPOT from the per-request arrays, not vLLM's unweighted mean
    assert abs(c.mean_a - base * sum(a) / 3) < 1e-9 and abs(c.mean_a - 3.8100150533756105) > 0.03


def test_four_percent_apart_with_three_runs_is_inconclusive_with_the_runs_to_add(tmp_path):
    _write_repeats(tmp_path / "c", "w1", [1.0, 1.004, 0.997])
    _write_repeats(tmp_path / "c", "w2", [1.04, 1.036, 1.046])
    g = check_equivalence(scan_campaign(tmp_path / "c"), EquivalenceRule())
    assert not g.passed and g.verdict.startswith("INCONCLUSIVE: the data can show equivalence only within ±")
    assert "2 more run(s) of the baseline per node" in g.verdict


def test_a_gap_at_another_concurrency_is_a_named_warning(tmp_path):
    from campaign_builder import REPORT, write_campaign
    data = dict(REPORT)
    out, total, tpot, ttft, itl, dur = data[("w2", "vanilla", 1)]
    data[("w2", "vanilla", 1)] = (out / 1.06, total / 1.06, tpot * 1.06, ttft, itl * 1.06, dur * 1.06)  # 6 % at c=1
    g = check_equivalence(scan_campaign(write_campaign(tmp_path / "c", data)), EquivalenceRule())
    assert g.passed  # the rule's point (c=16) decides the merge
    [w] = [n for n in g.notes if n.startswith("WARNING: w1 vs w2 at concurrency 1 (not the rule's point)")]
    assert "+6.16 %" in w and "INCONCLUSIVE" in w  # 47.01 x 1.06 vs 46.94 ms
    # issue 39: the gate table's own rows at c=1 say it, where the verdict column used to stay empty
    t = g.table
    c1 = t[(t.concurrency == 1) & (t.metric == "output tok/s")].iloc[0]
    assert round(c1.diff_pct, 2) == -5.84 and c1.verdict.startswith("NOTE: -5.84 % beyond ±3 %")
    assert "not the gate's point" in c1.verdict
    assert (t[(t.concurrency == 16)].verdict.str.startswith("NOTE") == False).all()  # noqa: E712  equal at c=16
