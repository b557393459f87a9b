"""The EAGLE-3 drafter checked against the served model before any server starts (worker/drafter.py),
each rule on speculators-format configs (tests/fixtures/speculators), on the worker and in the report."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from specfleet.worker import drafter
from specfleet.worker.runner import EXIT_FAILED, EXIT_OK

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "speculators"
DRAFT = json.loads((FIX / "qwen3-32b-eagle3.json").read_text())
MODEL = json.loads((FIX / "qwen3-32b.json").read_text())
M, D = "/mnt/Qwen3-32B", "/mnt/Qwen3-32B-speculator.eagle3"


def run(draft=None, model=None, method="eagle3", k=3, model_dir=M):
    return drafter.check(draft or DRAFT, model or MODEL, method=method, k=k, model_dir=model_dir, draft_dir=D)


def changed(base: dict, path: str, value) -> dict:
    out = copy.deepcopy(base)
    *head, last = path.split(".")
    node = out
    for p in head:
        node = node[int(p)] if p.isdigit() else node[p]
    node[int(last) if last.isdigit() else last] = value
    return out


def test_the_published_layout_for_its_model_is_consistent():
    assert run() == (None, [], [])


@pytest.mark.parametrize("draft, model, method, refusal", [
    (DRAFT, MODEL, "dflash", f"the drafter {D} is a speculators 'eagle3' model (speculators_model_type), the plan's "
                             "method is 'dflash'"),
    (changed(DRAFT, "transformer_layer_config.model_type", "mistral"), MODEL, "eagle3",
     f"the drafter {D}'s draft layer is model_type 'mistral'; vLLM's EAGLE-3 loads llama or qwen3 draft layers"),
    (changed(DRAFT, "transformer_layer_config.hidden_size", 4096), MODEL, "eagle3",
     f"the drafter {D} was trained for hidden size 4096 (hidden_size), the model {M} has hidden size 5120"),
    (changed(DRAFT, "target_hidden_size", 4096), MODEL, "eagle3",
     f"the drafter {D} was trained for hidden size 4096 (target_hidden_size), the model {M} has hidden size 5120"),
    (DRAFT, changed(MODEL, "vocab_size", 152064), "eagle3",
     f"the drafter {D} has vocabulary size 151936, the model {M} has 152064"),
    (changed(DRAFT, "draft_vocab_size", 200000), MODEL, "eagle3",
     f"the drafter {D}'s draft_vocab_size 200000 is larger than its vocabulary 151936"),
    (DRAFT, changed(MODEL, "num_hidden_layers", 48), "eagle3",
     f"the drafter {D} reads hidden states of layer 61 (eagle_aux_hidden_state_layer_ids), the model {M} has 48 "
     "layers (states 0-48)"),
])
def test_a_mismatch_refuses_naming_both_values(draft, model, method, refusal):
    assert run(draft, model, method) == (refusal, [], [])


def test_the_last_layer_s_output_is_a_state_the_model_has():
    # id L (the model's layer count) is the last layer's output, which vLLM hands over; L + 1 is not
    layers = max(DRAFT["eagle_aux_hidden_state_layer_ids"])
    assert run(DRAFT, changed(MODEL, "num_hidden_layers", layers), "eagle3")[0] is None
    assert "reads hidden states of layer" in run(DRAFT, changed(MODEL, "num_hidden_layers", layers - 1), "eagle3")[0]


def test_a_vlm_s_text_config_is_the_model_compared():
    vlm = {"architectures": ["Qwen3VLForConditionalGeneration"], "text_config": changed(MODEL, "hidden_size", 4096)}
    assert "the model /mnt/Qwen3-32B has hidden size 4096" in run(model=vlm)[0]


def test_a_verifier_that_is_not_the_served_model_is_a_warning_quoting_the_field_report():
    _, warnings, _ = run(model_dir="/mnt/Llama-3.1-8B")
    assert warnings == [f"the drafter {D} was trained for verifier 'Qwen/Qwen3-32B', the served model is "
                        f"'Llama-3.1-8B': {drafter.VERIFIER_RULE}"]
    assert "acceptance drops (field report §1.3)" in drafter.VERIFIER_RULE
    _, warnings, _ = run(model=changed(MODEL, "architectures", ["Qwen2ForCausalLM"]))
    assert warnings[0].startswith(f"the drafter {D}'s verifier architectures ['Qwen3ForCausalLM'] are not the "
                                  "served model's ['Qwen2ForCausalLM']")
    # architectures may be [] (speculators before 2026-06): not compared
    assert run(changed(DRAFT, "speculators_config.verifier.architectures", []),
               changed(MODEL, "architectures", ["Qwen2ForCausalLM"])) == (None, [], [])


def test_a_quantized_model_under_a_bf16_verifier_is_a_warning():
    fp8 = changed(MODEL, "quantization_config", {"quant_method": "fp8", "activation_scheme": "dynamic"})
    _, warnings, _ = run(model=fp8, model_dir="/mnt/Qwen3-32B")
    assert warnings == [f"the served model is quantized (fp8), the drafter {D}'s verifier 'Qwen/Qwen3-32B' is not: "
                        + drafter.VERIFIER_RULE]
    trained_on_fp8 = changed(DRAFT, "speculators_config.verifier.name_or_path", "RedHatAI/Qwen3-32B-FP8-dynamic")
    assert run(trained_on_fp8, fp8, model_dir="/mnt/Qwen3-32B-FP8-dynamic") == (None, [], [])


def test_the_trained_depth_against_the_plan_s_k_is_a_note():
    assert run(k=8)[2] == [f"the drafter {D} was trained to propose 3 tokens (proposal_methods[0].speculative_tokens), "
                           "the plan asks num_speculative_tokens 8"]


def test_a_drafter_outside_the_speculators_format_is_checked_where_it_can_be():
    hf = {k: v for k, v in DRAFT["transformer_layer_config"].items()}   # the HF EAGLE-3 layout: one flat config
    assert run(hf)[0] is None and "not in the speculators format" in run(hf)[2][0]
    assert "hidden size 4096" in run(changed(hf, "hidden_size", 4096))[0]


# on the worker: the runner's preflight, as every item runs it
def _bed_eagle(bed, draft: dict, model: dict | None = None):
    (bed.model / "config.json").write_text(json.dumps(model or MODEL))
    d = bed.tmp / "models" / "Qwen3-32B-speculator.eagle3"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(draft))
    plan = bed.plan()
    plan.configurations[2].speculative_config = {"method": "eagle3", "model": str(d), "num_speculative_tokens": 3}
    path = bed.spec(plan, queue=["eagle3"])
    spec = json.loads(path.read_text())
    spec["items"][0].pop("fit", None)   # the prompt-fit check needs a tokenizer the bed's model has not
    path.write_text(json.dumps(spec))
    return path, d


def test_the_worker_refuses_a_4096_drafter_for_the_5120_model_before_a_server_starts(bed):
    path, d = _bed_eagle(bed, changed(DRAFT, "transformer_layer_config.hidden_size", 4096))
    assert bed.run(path) == EXIT_FAILED
    assert bed.items()["eagle3"]["error"] == (f"the drafter {d} was trained for hidden size 4096 (hidden_size), "
                                              f"the model {bed.model} has hidden size 5120; nothing was started")
    assert not (bed.run_dir / "eagle3.server.log").exists()


def test_the_worker_records_a_verifier_warning_in_every_result(bed):
    path, _ = _bed_eagle(bed, changed(DRAFT, "speculators_config.verifier.name_or_path", "Qwen/Qwen3-14B"))
    assert bed.run(path) == EXIT_OK, bed.log()
    result = json.loads((bed.run_dir / "eagle3_conc1.json").read_text())
    check = json.loads(result["drafter_check"])
    assert check["notes"] == [] and check["warnings"][0].startswith(
        "the drafter " + str(bed.tmp / "models" / "Qwen3-32B-speculator.eagle3")
        + " was trained for verifier 'Qwen/Qwen3-14B', the served model is 'm'")
