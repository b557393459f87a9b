"""The steady-state refusal counts waves (prompts / concurrency) and names every honest way out
(issue 41: 48 prompts at c=16 were refused as "one wave that drains", naming only report-setup)."""
import textwrap

import pytest

from specfleet.plan import PlanError, load_plan

PLAN = textwrap.dedent("""\
    campaign: t
    model: {name: m, candidates: [/m/a], weights_gib: 1}
    configurations:
      - {name: vanilla, speculative_config: null}
    baseline: vanilla
    benchmark: {dataset_path: /d/q.jsonl, chat_template: double, concurrencies: [1, 16], PROMPTS}
    """)


def refusal(tmp_path, prompts: str) -> str:
    f = tmp_path / "p.yml"
    f.write_text(PLAN.replace("PROMPTS", prompts))
    with pytest.raises(PlanError) as e:
        load_plan(f)
    return str(e.value)


def test_three_waves_are_counted_as_three_and_every_way_out_is_named(tmp_path):
    m = refusal(tmp_path, "num_prompts: 48")
    assert "field 'benchmark.num_prompts': 48 prompts at concurrency 16 is 3 waves (48 / 16)" in m, m
    assert "one wave" not in m and "\n" not in m
    assert "fewer than the 5 waves a steady state needs here (min_prompts_per_concurrency)" in m
    # the ways out: more prompts (or a sweep point for that concurrency), fewer waves on purpose, the report's setup
    assert "raise num_prompts to 80" in m and "{concurrency: 16, num_prompts: 80}" in m
    assert "`min_prompts_per_concurrency: 3`" in m and "`steady_state: report-setup`" in m
    # and each of them loads
    f = tmp_path / "ok.yml"
    for ok in ("num_prompts: 80", "num_prompts: 48, min_prompts_per_concurrency: 3",
               "num_prompts: 48, steady_state: report-setup",
               "num_prompts: 16, sweep: [{concurrency: 1}, {concurrency: 16, num_prompts: 80}]"):
        f.write_text(PLAN.replace("PROMPTS", ok))
        assert load_plan(f).benchmark.cells, ok


def test_one_wave_is_one_wave_and_is_not_offered_as_fewer_waves(tmp_path):
    m = refusal(tmp_path, "num_prompts: 16")
    assert "16 prompts at concurrency 16 is one wave that drains" in m
    assert "min_prompts_per_concurrency: 1`" not in m   # one wave unstamped is no honest way out
    assert "`steady_state: report-setup`" in m
