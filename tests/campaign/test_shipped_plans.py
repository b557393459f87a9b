"""Every plan under plans/ runs as shipped on the demo fleet, or `fab bench` refuses it at plan time
(before any host is touched, also under --check) in one line with the reason and the fix."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specfleet.campaign import load_plan, promptcount, split
from specfleet.campaign.split import NodeInfo
from specfleet.plan import PlanError
from specfleet.worker.slots import needed

PROJECT = Path(__file__).resolve().parents[2]
FAB = str(Path(sys.executable).parent / "fab")
PLANS = sorted((PROJECT / "plans").glob("*.yml"))


def demo_fleet(plan) -> list[NodeInfo]:
    """`fab testbed.up`'s workers: two of one GPU; a plan whose servers want several GPUs (or several at
    once) gets `fab testbed.up --gpus 8`: one node of 8 GPUs in two NVLink groups of 4."""
    wide = max(needed(list(plan.server.args) + list(c.extra_args)) for c in plan.configurations)
    if wide == 1 and plan.packing != "shared":
        return [NodeInfo("w1"), NodeInfo("w2")]
    return [NodeInfo("w1", gpus=tuple({"index": i, "name": "NVIDIA H200"} for i in range(8)),
                     gpu_groups=((0, 1, 2, 3), (4, 5, 6, 7)))]


def refusal(plan_file: Path) -> str | None:
    try:
        promptcount.check(load_plan(plan_file))
    except PlanError as e:
        return str(e)
    return None


@pytest.mark.parametrize("plan_file", PLANS, ids=[p.name for p in PLANS])
def test_a_shipped_plan_splits_on_the_demo_fleet_or_is_refused_with_the_fix(plan_file):
    why = refusal(plan_file)
    if why is None:
        plan = load_plan(plan_file)
        s = split(plan, demo_fleet(plan))
        assert {c for q in s.queues.values() for c in q if "." not in c} == \
            {c.name for c in plan.configurations}  # every configuration has a node
    else:
        assert why.startswith(f"{plan_file}: field '") and "\n" not in why, why
        assert "point benchmark.dataset_path at the full Spec-Bench question.jsonl" in why, why


def test_the_refused_plans_are_the_followups_that_need_the_full_dataset():
    refused = {p.name for p in PLANS if refusal(p)}
    assert refused == {"followup-categories.yml", "followup-concurrency.yml", "followup-eagle3-k.yml",
                       "followup-output-len.yml"}
    assert "h200x8-tp.yml" not in refused


def test_fab_bench_refuses_them_before_any_host_also_under_check(tmp_path):
    inv = tmp_path / "inv.yml"  # a host that does not exist: it must never be contacted
    inv.write_text("all: {user: root, connect_timeout: 1}\nhosts: {w1: {address: 192.0.2.1}}\n")
    for plan_file in [p for p in PLANS if refusal(p)]:
        for extra in (["--check"], []):
            p = subprocess.run([FAB, "bench", "--plan", str(plan_file), "--inventory", str(inv), *extra],
                               cwd=PROJECT, env={**os.environ, "SPECFLEET_RUNS_DIR": str(tmp_path / "runs")},
                               capture_output=True, text=True, timeout=120)
            assert p.returncode == 1, p.stdout + p.stderr
            lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
            assert lines == [f"error: {refusal(plan_file)}"], lines
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no run began


def test_the_count_follows_categories_and_cells(tmp_path):
    data = tmp_path / "q.jsonl"
    data.write_text("".join(f'{{"question_id": {i}, "category": "{"qa" if i < 3 else "rag"}", "turns": ["x"]}}\n'
                            for i in range(5)))
    plan = tmp_path / "p.yml"
    base = ("campaign: t\nmodel: {name: m, candidates: [/m/a], weights_gib: 1}\n"
            "configurations:\n  - {name: vanilla, speculative_config: null}\nbaseline: vanilla\n"
            "equivalence: {concurrency: 1}\n")
    plan.write_text(base + "benchmark: {dataset_path: q.jsonl, chat_template: double, concurrencies: [1], "
                    "num_prompts: 5}\n")
    promptcount.check(load_plan(plan))  # 5 of 5
    plan.write_text(base + "benchmark: {dataset_path: q.jsonl, chat_template: double, concurrencies: [1], "
                    "num_prompts: 6}\n")
    with pytest.raises(PlanError, match=r"field 'benchmark.num_prompts': a run asks for 6 prompts, .* holds 5"):
        promptcount.check(load_plan(plan))
