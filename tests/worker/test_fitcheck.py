"""The prompt-fit check (fitcheck.py) on the field report's own dataset, with the simulated engine's tokenizer."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.shared_data import SPEC_BENCH

REPO = Path(__file__).resolve().parents[2]
REAL = SPEC_BENCH
FITCHECK = REPO / "specfleet" / "worker" / "fitcheck.py"


def fitcheck(tmp_path, *args):
    """`--dataset D --num-prompts N ...` as the run spec's fit (what the runner passes as --fit)."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 40960}))
    opts = dict(zip(args[::2], args[1::2]))
    kept = opts.pop("--write-kept", None)
    fit = {k.lstrip("-").replace("-", "_"): int(v) if k in ("--num-prompts", "--output-len") else v
           for k, v in opts.items()}
    p = subprocess.run([sys.executable, str(FITCHECK), "--model", str(model), "--fit", json.dumps(fit),
                        *(["--write-kept", kept] if kept else [])], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO / "testbed" / "simvllm")})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.skipif(not REAL.exists(), reason=f"the real Spec-Bench file {REAL} is not on this machine")
def test_the_real_dataset_at_160_prompts_has_two_that_do_not_fit_2048(tmp_path):
    kept = tmp_path / "kept.jsonl"
    ans = fitcheck(tmp_path, "--dataset", str(REAL), "--num-prompts", "160", "--output-len", "512",
                   "--chat-template", "double", "--max-model-len", "2048", "--write-kept", str(kept))
    # what the simulated server answers: "you requested 2090 tokens (1578 in the messages, 512 in the completion)"
    assert [(b["question_id"], b["prompt_tokens"]) for b in ans["too_long"]] == [(306, 1578), (316, 1560)]
    assert (ans["selected"], ans["kept"], ans["max_model_len"]) == (160, 158, 2048)
    rows = [json.loads(x) for x in kept.read_text().splitlines()]
    assert len(rows) == 158 and {r["question_id"] for r in rows}.isdisjoint({306, 316})
    # the first 16 (the report's setup) all fit; a longer context fits all 160; 2k means 2000
    assert fitcheck(tmp_path, "--dataset", str(REAL), "--num-prompts", "16", "--output-len", "512",
                    "--chat-template", "double", "--max-model-len", "2048")["too_long"] == []
    assert fitcheck(tmp_path, "--dataset", str(REAL), "--num-prompts", "160", "--output-len", "512",
                    "--chat-template", "double", "--max-model-len", "4096")["too_long"] == []
    assert fitcheck(tmp_path, "--dataset", str(REAL), "--num-prompts", "160", "--output-len", "512",
                    "--chat-template", "double", "--max-model-len", "2k")["max_model_len"] == 2000


def test_single_template_counts_one_template(tmp_path):
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"question_id": 1, "turns": ["hello there"]}) + "\n")
    one = fitcheck(tmp_path, "--dataset", str(data), "--num-prompts", "1", "--output-len", "1",
                   "--chat-template", "single", "--max-model-len", "4096")
    two = fitcheck(tmp_path, "--dataset", str(data), "--num-prompts", "1", "--output-len", "1",
                   "--chat-template", "double", "--max-model-len", "4096")
    assert one["kept"] == two["kept"] == 1 and one["too_long"] == two["too_long"] == []
    limit = fitcheck(tmp_path, "--dataset", str(data), "--num-prompts", "1", "--output-len", "1",
                     "--chat-template", "double", "--max-model-len", "12")  # 12 < double-templated tokens + 1
    assert limit["too_long"] and limit["too_long"][0]["question_id"] == 1
