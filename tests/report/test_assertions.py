"""A plan's `assertions:`: validated with the plan, checked by fab report / collect (exit 32), written to
plan.json for fab compare."""
from __future__ import annotations

import json

import pytest

from compare_builder import campaign, plan_raw
from specfleet.plan.assertions import FAILED, NOT_CHECKED, PASSED, Assertion, check
from specfleet.plan import PlanError, parse_plan
from specfleet.exits import EXIT_ASSERTION
from specfleet.report.scan.plan_snapshot import PLAN_SNAPSHOT
from specfleet.report.build import report_plan


@pytest.mark.parametrize("entry, error", [
    ({"config": "eagle4", "concurrency": 16, "metric": "speedup", "min": 1}, "field 'assertions.0.config': 'eagle4' is not a configuration"),
    ({"config": "eagle3", "concurrency": 16, "metric": "speedup"}, "needs min:, max: or both"),
    ({"config": "eagle3", "concurrency": 16, "metric": "speedup", "min": 2, "max": 1}, "min 2 is larger than max 1"),
    ({"config": "eagle3", "concurrency": 16, "metric": "tpot_ms", "max": 1, "use": "ci_low"}, "needs metric: speedup"),
    ({"config": "eagle3", "concurrency": 16, "metric": "speed", "min": 1}, "'assertions.0.metric'"),
])
def test_bad_assertion_is_one_line(entry, error):
    raw = plan_raw()
    raw["assertions"] = [entry]
    with pytest.raises(PlanError, match="demo.yml: field") as e:
        parse_plan(raw, "plans/demo.yml")
    assert error in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("bound", ["min: .nan", "max: .nan", "min: .inf", "max: -.inf", "min: .NaN"])
def test_a_nan_or_infinite_bound_is_refused_at_plan_load(bound):
    """`min: .nan` compared false with every figure, so the assertion always passed: refused at load."""
    import yaml
    raw = plan_raw()
    raw["assertions"] = [{"config": "eagle3", "concurrency": 16, "metric": "speedup", **yaml.safe_load(bound)}]
    field = bound.split(":")[0]
    with pytest.raises(PlanError) as e:
        parse_plan(raw, "plans/demo.yml")
    assert str(e.value).startswith(f"plans/demo.yml: field 'assertions.0.{field}': ") and "\n" not in str(e.value)
    assert "finite" in str(e.value)


def test_assertions_are_not_in_the_plan_hash():
    a, b = plan_raw(), plan_raw()
    b["assertions"] = []
    assert parse_plan(a, "p.yml").plan_hash() == parse_plan(b, "p.yml").plan_hash()


def test_check_states():
    rows = [{"config": "eagle3", "concurrency": 16, "cell": "conc16", "node": "w2", "speedup": 1.8,
             "speedup_ci_low": float("nan")}]
    got = check([Assertion(config="eagle3", concurrency=16, metric="speedup", min=1.7),
                 Assertion(config="eagle3", concurrency=16, metric="speedup", min=1.9),
                 Assertion(config="eagle3", concurrency=1, metric="speedup", min=1.0),
                 Assertion(config="eagle3", concurrency=16, metric="speedup", min=1.7, use="ci_low")], rows)
    assert [g.state for g in got] == [PASSED, FAILED, NOT_CHECKED, NOT_CHECKED]
    assert "single run: no interval" in got[3].detail and "1.800 on w2" in got[1].detail


def test_report_checks_assertions_and_writes_the_snapshot(tmp_path):
    raw = plan_raw()
    raw["assertions"].append({"config": "eagle3", "concurrency": 16, "metric": "speedup", "min": 2.5})
    d = campaign(tmp_path / "results", raw, seed=1)
    (d / PLAN_SNAPSHOT).unlink()
    plan = parse_plan(raw, "plans/demo.yml")
    out = report_plan(plan, "plans/demo.yml", tmp_path / "results", quiet=True)
    assert out.merged and [a.state for a in out.assertions] == [PASSED, FAILED]
    assert out.exit_code & EXIT_ASSERTION
    snap = json.loads((d / PLAN_SNAPSHOT).read_text())
    assert snap["plan_hash"] == plan.plan_hash() and snap["assertions"][1]["min"] == 2.5


def test_the_report_says_what_was_not_checked_against_a_vllm_release(tmp_path):
    """A method no release of the matrix has runs only with the plan's opt-in, and the report says so."""
    raw = plan_raw()
    d = campaign(tmp_path / "results", raw, seed=1)
    (d / PLAN_SNAPSHOT).unlink()
    eagle = next(c for c in raw["configurations"] if c["name"] == "eagle3")
    eagle["speculative_extra_methods"] = ["eagle9"]
    eagle["speculative_config"]["method"] = "eagle9"
    raw["vllm_version"] = "0.99.0"
    out = report_plan(parse_plan(raw, "plans/demo.yml"), "plans/demo.yml", tmp_path / "results", quiet=True)
    assert "configuration 'eagle3': speculative method 'eagle9' is in no vLLM release of the matrix (opted in by " \
           "speculative_extra_methods): not checked against the release" in out.warnings
    assert any(w.startswith("the plan pins vLLM 0.99.0, which the release matrix") for w in out.warnings)


def test_the_report_says_a_real_vllm_outside_the_matrix_was_not_checked(tmp_path):
    from campaign_builder import write_campaign
    from specfleet.report.build import report_campaign
    camp = write_campaign(tmp_path / "c", extra={"vllm_version": "0.29.0"})
    out = report_campaign(camp, quiet=True)
    assert ("the results ran vLLM 0.29.0, which the release matrix (docs/vllm-releases.md) does not hold: the plan's "
            "flags, speculative keys, methods, dataset and chat template were not checked against it") in out.warnings
    other = write_campaign(tmp_path / "d")   # 0.28.0: in the matrix
    assert not [w for w in report_campaign(other, quiet=True).warnings if "release matrix" in w]
