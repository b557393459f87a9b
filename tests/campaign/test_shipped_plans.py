"""Every plan under plans/ runs as shipped on the demo fleet, or `fab bench` refuses it at plan time
(before any host is touched, also under --check) in one line with the reason and the fix."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specfleet.campaign import load_plan, promptcount, split
from specfleet.campaign.commands import Paths, item_spec
from specfleet.campaign.schedule.split import NodeInfo
from specfleet.plan import PlanError, gpus_needed
from tests.shared_data import SPEC_BENCH as SHARED_SPEC_BENCH

PROJECT = Path(__file__).resolve().parents[2]
FAB = str(Path(sys.executable).parent / "fab")
PLANS = sorted((PROJECT / "plans").glob("*.yml"))


def demo_fleet(plan) -> list[NodeInfo]:
    """`fab testbed.up`'s workers: two of one GPU; a plan whose servers want several GPUs (or several at
    once) gets `fab testbed.up --gpus 8`: one node of 8 GPUs in two NVLink groups of 4."""
    wide = max(gpus_needed(plan, c.name) for c in plan.configurations)
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


# ---------------------------------------------------------------- on the full Spec-Bench file
# tests reach the shared dataset beside the checkout (tests/shared_data.py); SPECFLEET_SPEC_BENCH_JSONL
# names it elsewhere (a worktree whose parent has no shared/)
SPEC_BENCH = Path(os.environ.get("SPECFLEET_SPEC_BENCH_JSONL") or SHARED_SPEC_BENCH)
FITCHECK = PROJECT / "specfleet" / "worker" / "fitcheck.py"
SIMVLLM = PROJECT / "testbed" / "simvllm"  # the tokenizer the fit check uses on a testbed worker


def on_the_full_file(plan_file: Path, tmp_path: Path):
    """The plan as its comment tells a real campaign to run it: benchmark.dataset_path the full file."""
    doc = yaml.safe_load(plan_file.read_text())
    doc["benchmark"]["dataset_path"] = str(SPEC_BENCH)
    out = tmp_path / plan_file.name
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_plan(out)


def fit_answer(fit: dict, tmp_path: Path, cache: dict) -> dict:
    """The worker's prompt-fit check (specfleet/worker/fitcheck.py, as lane.fit_bench runs it) on one fit."""
    key = json.dumps(fit, sort_keys=True)
    if key not in cache:
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps({"max_position_embeddings": 40960}))
        p = subprocess.run([sys.executable, str(FITCHECK), "--model", str(model), "--fit", key],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(SIMVLLM)}, timeout=300)
        assert p.returncode == 0, p.stderr
        cache[key] = json.loads(p.stdout.strip().splitlines()[-1])
    return cache[key]


# the plans that read Spec-Bench (a custom-dataset plan reads the user's own file: tests/worker/test_custom_dataset.py)
SPEC_BENCH_PLANS = [p for p in PLANS if yaml.safe_load(p.read_text())["benchmark"].get("dataset_name",
                                                                                       "spec_bench") == "spec_bench"]


@pytest.mark.parametrize("plan_file", SPEC_BENCH_PLANS, ids=[p.name for p in SPEC_BENCH_PLANS])
def test_a_shipped_plan_runs_on_the_full_spec_bench_file(plan_file, tmp_path):
    """Pointed at the full file (480 prompts), every bench run of every queue item passes the worker's
    prompt-fit check as lane.fit_bench decides it: the file holds the prompts asked for, and every
    selected prompt + output_len fits --max-model-len, or the plan drops the few that do not and some
    are left. Counted with the simulated engine's tokenizer (the testbed's); Qwen3's own tokenizer is
    not on this machine: not checked."""
    if not SPEC_BENCH.is_file():
        pytest.skip(f"the full Spec-Bench file is not at {SPEC_BENCH} (shared/ beside the checkout, or "
                    "SPECFLEET_SPEC_BENCH_JSONL)")
    plan = on_the_full_file(plan_file, tmp_path)
    promptcount.check(plan)  # the bastion's count: the file holds every run's prompts
    items = sorted({c for q in split(plan, demo_fleet(plan)).queues.values() for c in q})
    cache: dict = {}
    for item in items:
        spec = item_spec(plan, "w1", item, Paths(venv="/v", work_dir="/w")).to_json()
        for b in spec["bench"]:
            fit = {**spec["fit"], **(b.get("fit") or {})}
            fit.pop("policy")
            ans = fit_answer(fit, tmp_path, cache)
            where = f"{plan_file.name} {item} {b.get('cell') or ''}: "
            assert ans["selected"] >= fit["num_prompts"], where + json.dumps(ans)[:300]
            if ans["too_long"]:
                assert plan.benchmark.prompts_that_do_not_fit == "drop" and ans["kept"] > 0, \
                    where + f"{len(ans['too_long'])} of {ans['selected']} do not fit: {ans['too_long'][:3]}"


def test_one_model_location_and_one_drafter_location_across_plans_and_the_example_inventory():
    """A local copy /mnt/<model> first, the NFS share /mnt/fabrix/models/<model> next, the EAGLE-3 draft on
    the share; inventory/example.yml's model_candidates are the field report's plans' own. The lent GPU's
    harness plans (h200-dummy8b, gpu-nodes-dummy8b) read the random-weight model that harness generates
    under /tmp/sfgpu (testbed/realgpu)."""
    inv = yaml.safe_load((PROJECT / "inventory/example.yml").read_text())
    for plan_file in PLANS:
        doc = yaml.safe_load(plan_file.read_text())
        if all(c.startswith("/tmp/sfgpu/") for c in doc["model"]["candidates"]):
            continue
        base = doc["model"]["name"].rpartition("/")[2]
        assert doc["model"]["candidates"] == [f"/mnt/{base}", f"/mnt/fabrix/models/{base}"], plan_file.name
        if base == "Qwen3-32B":
            assert doc["model"]["candidates"] == inv["all"]["vars"]["model_candidates"], plan_file.name
        for c in doc["configurations"]:
            sc = c.get("speculative_config") or {}
            if sc.get("model"):
                assert sc["model"] == f"/mnt/fabrix/models/{base}-speculator.eagle3", (plan_file.name, c["name"])


def test_the_example_inventory_names_only_datasets_the_repository_has():
    inv_file = PROJECT / "inventory/example.yml"
    tracked = set(subprocess.run(["git", "-C", str(PROJECT), "ls-files", "datasets"], capture_output=True, text=True,
                                 check=True).stdout.split())
    for rel in yaml.safe_load(inv_file.read_text())["bastion"]["vars"]["datasets"]:
        path = (inv_file.parent / rel).resolve()
        assert path.is_file() and str(path.relative_to(PROJECT)) in tracked, rel
