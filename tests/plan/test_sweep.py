"""Plans that sweep: expanded configurations, bench cells, their commands, the split over them."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from specfleet.campaign.commands import Paths, commands_for, item_spec, server_per_repeat
from tests.run_argv import rendered
from specfleet.worker.layout import cell_result_filename as result_filename
from specfleet.worker.fitcheck import select
from specfleet.plan import PlanError, load_plan, parse_plan
from specfleet.campaign.schedule.split import NodeInfo, item_s, split
from specfleet.plan.sweep import parse_cell, parse_result_name
from tests.shared_data import SPEC_BENCH

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "plans/demo.yml"
FULL = SPEC_BENCH
PATHS = Paths(venv="/opt/v", work_dir="/w", dataset="/w/q.jsonl")
SPEC_AT = {"server_host": "127.0.0.1", "port": 8000}  # where the runner renders the argv (runspec.rendered)


def demo(edit=None) -> dict:
    doc = yaml.safe_load(DEMO.read_text())
    if edit:
        edit(doc)
    return doc


def bad(edit) -> str:
    with pytest.raises(PlanError) as e:
        parse_plan(demo(edit), "plans/x.yml")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("plans/x.yml: ")
    return msg


def test_a_plan_without_sweeps_keeps_its_names_hash_and_items():
    p = load_plan(DEMO)
    assert [c.name for c in p.benchmark.cells] == ["conc1", "conc16"]
    assert "sweep" not in p.canonical_json()  # the hash of every existing plan is unchanged
    it = item_spec(p, "w1", "eagle3", PATHS)
    assert [b.result_file for b in it.bench] == [f"eagle3_conc{c}_r{r}.json" for r in (1, 2, 3) for c in (1, 16)]
    assert all("cell" not in b and "fit" not in b for b in it.to_json()["bench"])
    assert not any("--spec-bench-category" in argv for argv in rendered(SPEC_AT, it)[1])


def test_server_sweep_expands_a_configuration_into_named_configurations():
    p = parse_plan(demo(lambda d: d["configurations"][3].update(sweep={"num_speculative_tokens": [2, 3, 4, 5]})))
    names = [c.name for c in p.configurations]
    assert names == ["vanilla", "ngram", "ngram_improved", "eagle3-k2", "eagle3-k3", "eagle3-k4", "eagle3-k5"]
    assert [p.config(f"eagle3-k{k}").speculative_config["num_speculative_tokens"] for k in (2, 3, 4, 5)] == [2, 3, 4, 5]
    assert p.config("eagle3-k2").speculative_config["model"].endswith("eagle3")  # the rest is kept
    assert p.sweeps["eagle3-k4"] == {"from": "eagle3", "point": {"num_speculative_tokens": 4}}
    # a product of two keys, and a server flag, and listed points with an own name
    p = parse_plan(demo(lambda d: d["configurations"][1].update(
        sweep={"prompt_lookup_min": [2, 3], "--max-num-seqs": [64]})))
    assert [c.name for c in p.configurations][1:3] == ["ngram-pmin2-max-num-seqs64", "ngram-pmin3-max-num-seqs64"]
    assert p.config("ngram-pmin3-max-num-seqs64").extra_args == ["--max-num-seqs", "64"]
    p = parse_plan(demo(lambda d: d["configurations"][1].update(
        sweep=[{"name": "ngram-wide", "prompt_lookup_max": 8}, {"--enforce-eager": True}])))
    assert [c.name for c in p.configurations][1:3] == ["ngram-wide", "ngram-enforce-eager"]
    assert p.config("ngram-enforce-eager").extra_args == ["--enforce-eager"]


def test_bad_sweeps_are_one_line_errors_naming_file_configuration_and_field():
    assert "configuration 'eagle3', field 'sweep.num_spec_tokens': neither a speculative_config key" in \
        bad(lambda d: d["configurations"][3].update(sweep={"num_spec_tokens": [2]}))
    assert "configuration 'eagle3-k0', field 'speculative_config': num_speculative_tokens must be a positive" in \
        bad(lambda d: d["configurations"][3].update(sweep={"num_speculative_tokens": [0]}))
    assert "configuration 'vanilla', field 'sweep': the baseline" in \
        bad(lambda d: d["configurations"][0].update(sweep={"--max-num-seqs": [8]}))
    assert "field 'extra_args': --port is set by the plan field server.port" in \
        bad(lambda d: d["configurations"][3].update(sweep={"--port": [9000]}))
    assert "name 'eagle3-k3' appears twice" in bad(lambda d: (
        d["configurations"][3].update(sweep={"num_speculative_tokens": [3]}),
        d["configurations"].append({"name": "eagle3-k3", "speculative_config": None})))
    assert "field 'benchmark.sweep.category': 'a-b' is not a category name" in \
        bad(lambda d: d["benchmark"].update(sweep={"category": ["a-b"]}))
    assert "field 'benchmark.sweep.outputlen': not a bench dimension" in \
        bad(lambda d: d["benchmark"].update(sweep={"outputlen": [1]}))
    assert "field 'benchmark.sweep.output_len': lists the same value twice" in \
        bad(lambda d: d["benchmark"].update(sweep={"output_len": [64, 64]}))


def test_bench_cells_product_and_points_have_stable_names():
    p = parse_plan(demo(lambda d: d["benchmark"].update(sweep={"output_len": [512, 1024], "category": ["rag"]})))
    assert [c.name for c in p.benchmark.cells] == [
        "conc1-out512-cat_rag", "conc1-out1024-cat_rag", "conc16-out512-cat_rag", "conc16-out1024-cat_rag"]
    more = parse_plan(demo(lambda d: d["benchmark"].update(sweep={"output_len": [512, 1024, 2048], "category": ["rag"]})))
    assert {c.name for c in p.benchmark.cells} < {c.name for c in more.benchmark.cells}  # adding never renames
    p = parse_plan(demo(lambda d: d["benchmark"].update(sweep=[{"concurrency": 4, "num_prompts": 40},
                                                               {"category": "summarization"}])))
    cells = {c.name: c for c in p.benchmark.cells}
    assert list(cells) == ["conc4-n40", "conc1-cat_summarization-n16", "conc16-cat_summarization-n16"]
    assert (cells["conc4-n40"].num_prompts, cells["conc4-n40"].category) == (40, None)
    for name in cells:
        f = result_filename("ngram_improved", cells[name], 2, 3)
        assert parse_result_name(f) == ("ngram_improved", name, cells[name].concurrency, 2)
    assert parse_cell("conc16-out1024-cat_math_reasoning-n80") == {
        "concurrency": 16, "output_len": 1024, "category": "math_reasoning", "num_prompts": 80, "request_rate": None}
    assert parse_result_name("vanilla_conc16.json") == ("vanilla", "conc16", 16, None)


def test_steady_state_rule_holds_per_cell():
    msg = bad(lambda d: d["benchmark"].update(steady_state="required", num_prompts=80,
                                              sweep=[{"concurrency": 16, "num_prompts": 20}]))
    assert "field 'benchmark.sweep.num_prompts': 20 prompts at concurrency 16 (cell conc16-n20) is 1.25 waves" in msg
    parse_plan(demo(lambda d: d["benchmark"].update(steady_state="required", num_prompts=80,
                                                    sweep=[{"concurrency": 16}, {"concurrency": 1, "num_prompts": 10}])))


def test_one_item_per_server_configuration_holds_every_cell_with_its_own_argv():
    p = parse_plan(demo(lambda d: (d["benchmark"].update(repeat=1, sweep={"category": ["summarization", "rag"]}),
                                   d["configurations"][3].update(sweep={"num_speculative_tokens": [2, 4]}))))
    it = item_spec(p, "w2", "eagle3-k4", PATHS)
    assert [b.cell for b in it.bench] == [c.name for c in p.benchmark.cells]
    serve, argvs = rendered(SPEC_AT, it)
    for b, argv, cell in zip(it.to_json()["bench"], argvs, p.benchmark.cells):
        assert argv[argv.index("--spec-bench-category") + 1] == cell.category
        assert argv[argv.index("--max-concurrency") + 1] == str(cell.concurrency)
        assert f"category={cell.category}" in argv[argv.index("--metadata"):]
        assert b["result_file"] == f"eagle3-k4_{cell.name}.json" and b["fit"] == {"category": cell.category}
    assert '"num_speculative_tokens":4' in " ".join(serve)
    lines = commands_for(p, "w2", "eagle3-k4", PATHS)
    assert len(lines) == 1 + len(p.benchmark.cells) and lines[0].split()[1] == "serve"


def test_split_schedules_expanded_items_against_one_load_each():
    p = load_plan(ROOT / "plans/followup-eagle3-k.yml")
    nodes = [NodeInfo("w1"), NodeInfo("w2")]
    s = split(p, nodes)
    assert all(q[0] == "vanilla" for q in s.queues.values())
    assert sorted(c for q in s.queues.values() for c in q[1:]) == [f"eagle3-k{k}" for k in (2, 3, 4, 5)]
    assert s.ratio <= 1.10, s  # the bound test_split.py holds random campaigns to
    # an item's time grows with its cells, its load does not
    longer = parse_plan({**p.model_dump(mode="json"), "benchmark": {
        **p.model_dump(mode="json")["benchmark"], "sweep": {"output_len": [512, 1024, 2048]}}})
    one, three = item_s(p, "eagle3-k3", nodes[0]), item_s(longer, "eagle3-k3", nodes[0])
    # one load per server start: one per repeat with repeat_isolation server-start
    load = (61.0 * 1073.741824 / 105.0 + 60.0) * (p.benchmark.repeat if server_per_repeat(p) else 1)
    assert three - load == pytest.approx((one - load) * (512 + 1024 + 2048) / 512, rel=0.2)


def test_category_filter_before_the_seeded_shuffle_as_vllm_does(tmp_path):
    src = ROOT / "datasets/sample/question.jsonl"
    rag = select(str(src), 3, "rag")
    assert len(rag) == 3 and {r["category"] for r, _ in rag} == {"rag"}
    assert len(select(str(src), 0, "rag")) == 5  # the sample holds 5 rag prompts
    # SpecBench.load_data: the category's rows in file order, then random.seed(0) + shuffle, then the first N
    rows = [json.loads(ln) for ln in src.read_text().splitlines() if ln.strip()]
    rows = [r for r in rows if r["category"] == "rag"]
    random.seed(0)
    random.shuffle(rows)
    assert [r["question_id"] for r, _ in rag] == [r["question_id"] for r in rows[:3]]


@pytest.mark.skipif(not FULL.is_file(), reason=f"the full Spec-Bench file {FULL} is absent")
def test_every_category_of_the_full_spec_bench_file_can_be_a_cell():
    sizes = {c: len(select(str(FULL), 0, c)) for c in (
        "translation", "summarization", "qa", "math_reasoning", "rag", "writing", "roleplay", "reasoning",
        "math", "coding", "extraction", "stem", "humanities")}
    assert sum(sizes.values()) == 480 and sizes["rag"] == 80 and sizes["coding"] == 10
