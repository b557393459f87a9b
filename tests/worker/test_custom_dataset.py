"""`dataset_name: custom`: the user's own JSONL (vLLM's CustomDataset, one {"prompt": ...} a line),
validated on the bastion (one line naming file, line and field), rendered with its own flags, its
prompts selected by the fit check as vLLM sends them (file order), and the report's follow-up 3 plan."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specfleet.campaign import promptcount
from specfleet.campaign.commands import Paths, commands_for, item_spec
from specfleet.plan import PlanError, load_plan, parse_plan
from specfleet.worker import fitcheck

PROJECT = Path(__file__).resolve().parents[2]
PLAN = PROJECT / "plans" / "followup-ngram-own-data.yml"
SAMPLE = PROJECT / "datasets" / "sample" / "summarize-rag.jsonl"


def raw_plan(tmp_path, dataset: Path, **bench) -> dict:
    doc = yaml.safe_load(PLAN.read_text())
    doc["benchmark"].update(dataset_path=str(dataset), **bench)
    return doc


def test_the_sample_is_a_custom_dataset_the_follow_up_plan_runs():
    plan = load_plan(PLAN)
    promptcount.check(plan)   # 24 records, each a prompt
    assert plan.benchmark.dataset_name == "custom" and plan.dataset_file().resolve() == SAMPLE.resolve()
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    assert len(rows) == 24 and all(set(r) == {"prompt"} and r["prompt"].strip() for r in rows)


def test_a_custom_run_renders_vllm_s_custom_flags():
    plan = load_plan(PLAN)
    bench = commands_for(plan, "w1", "ngram", Paths(venv="/v", work_dir="/w"))[1].split()
    assert bench[bench.index("--dataset-name") + 1] == "custom"
    assert bench[bench.index("--custom-output-len") + 1] == "256" and "--disable-shuffle" in bench
    assert "--spec-bench-output-len" not in bench
    it = item_spec(plan, "w1", "ngram", Paths(venv="/v", work_dir="/w", dataset="/w/d.jsonl"))
    assert it.fit.prompt_field == "prompt"


def test_a_spec_bench_item_keeps_its_hash():
    p = load_plan(PROJECT / "plans" / "demo.yml")
    it = item_spec(p, "w1", "ngram", Paths(venv="/v", work_dir="/w", dataset="/w/q.jsonl"))
    assert "prompt_field" not in it.to_json()["fit"]


@pytest.mark.parametrize("line, msg", [
    ('{"text": "hi"}', "line 3, field 'prompt': missing: must be the prompt text (a non-empty string)"),
    ('{"prompt": ""}', "line 3, field 'prompt': '': must be the prompt text"),
    ('{"prompt": 7}', "line 3, field 'prompt': 7: must be the prompt text"),
    ('{"prompt": "ok", "output_tokens": "ten"}', "line 3, field 'output_tokens': 'ten': must be a positive integer"),
    ('["prompt"]', "line 3: not a JSON object"),
    ('{"prompt": "x"', "line 3 is not JSON (a custom dataset has one {\"prompt\": ...} object a line)"),
])
def test_a_bad_record_is_refused_on_the_bastion_naming_file_line_and_field(tmp_path, line, msg):
    data = tmp_path / "mine.jsonl"
    data.write_text('{"prompt": "a"}\n\n' + line + "\n" + '{"prompt": "b"}\n' * 30)
    plan = parse_plan(raw_plan(tmp_path, data), tmp_path / "p.yml")
    with pytest.raises(PlanError) as e:
        promptcount.check(plan)
    assert str(e.value).startswith(f"{data}: ") and msg in str(e.value) and "\n" not in str(e.value)


def test_custom_needs_a_jsonl_name_and_has_no_categories(tmp_path):
    with pytest.raises(PlanError, match="must end in .jsonl: vLLM's custom dataset reads JSON Lines"):
        parse_plan(raw_plan(tmp_path, tmp_path / "mine.json"), tmp_path / "p.yml")
    doc = raw_plan(tmp_path, tmp_path / "mine.jsonl", sweep={"category": ["qa"]}, steady_state="report-setup")
    with pytest.raises(PlanError, match="a custom dataset has no categories"):
        parse_plan(doc, tmp_path / "p.yml")


def test_the_fit_check_selects_the_custom_prompts_in_file_order():
    rows = fitcheck.select(str(SAMPLE), 5, custom=True)
    assert [r["prompt"] for r, _ in rows] == [json.loads(line)["prompt"] for line in SAMPLE.read_text().splitlines()[:5]]


def test_the_fit_check_counts_a_custom_prompt(tmp_path):
    """fitcheck.py as the runner runs it, with the simulated engine's tokenizer: a prompt too long for
    --max-model-len is named by its record number."""
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({"prompt": "short"}) + "\n" + json.dumps({"prompt": "word " * 3000}) + "\n")
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    fit = {"dataset": str(data), "num_prompts": 2, "output_len": 16, "max_model_len": "1024",
           "chat_template": "double", "policy": "refuse", "prompt_field": "prompt"}
    sim = PROJECT / "testbed" / "simvllm"
    p = subprocess.run([sys.executable, str(PROJECT / "specfleet/worker/fitcheck.py"), "--model", str(model),
                        "--fit", json.dumps(fit)], capture_output=True, text=True, env={"PYTHONPATH": str(sim)})
    assert p.returncode == 0, p.stderr
    ans = json.loads(p.stdout.splitlines()[-1])
    assert ans["selected"] == 2 and ans["kept"] == 1 and [t["question_id"] for t in ans["too_long"]] == ["record 2"]


def test_every_prompt_of_the_sample_fits_the_follow_up_plan(tmp_path):
    """The shipped plan's fit check on its sample (the simulated engine's tokenizer; Qwen3's own is not on
    this machine: not checked): every selected prompt + output_len fits its --max-model-len."""
    plan = load_plan(PLAN)
    fit = dict(item_spec(plan, "w1", "ngram", Paths(venv="/v", work_dir="/w")).fit.to_json(), dataset=str(SAMPLE))
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 40960}))
    sim = PROJECT / "testbed" / "simvllm"
    p = subprocess.run([sys.executable, str(PROJECT / "specfleet/worker/fitcheck.py"), "--model", str(model),
                        "--fit", json.dumps(fit)], capture_output=True, text=True, env={"PYTHONPATH": str(sim)})
    ans = json.loads(p.stdout.splitlines()[-1])
    assert ans["selected"] == plan.benchmark.num_prompts == 20 and ans["too_long"] == [], ans
