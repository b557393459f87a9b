"""A trained drafter (EAGLE-3 and kin) checked against the served model before its server starts, from
the two config.json files alone (the speculators format: vllm-project/speculators `config.py`; what
vLLM reads of it: docs/dev/worker.md "The drafter check"). vLLM compares none of it when the drafter
is given as `--speculative-config '{"model": DIR}'`: a wrong hidden size or vocabulary fails after the
model load, or runs with low acceptance.

check() returns (refusal, warnings, notes): a refusal is one line naming both values; warnings and
notes go into every result of the item (`drafter_check`) and from there into the report.
"""
from __future__ import annotations

import os
import re

# the field report's §1.3 (translated): why a verifier mismatch is a warning
VERIFIER_RULE = ("the speculator config's verifier field is the training target; if it differs from the served "
                 "model (e.g. trained on bf16, applied to a quantized model) the hidden-state distribution shifts "
                 "and acceptance drops (field report §1.3)")
# speculators' model types as vLLM maps them to a method (configs/speculators/algos.py)
SPECULATOR_METHOD = {"eagle3": "eagle3", "peagle": "eagle3", "dflash": "dflash", "dflash2": "dflash",
                     "dspark": "dspark", "eagle": "eagle"}
EAGLE3_LAYERS = ("llama", "qwen3")   # vLLM's update_eagle3 builds Eagle3LlamaForCausalLM / Eagle3Qwen3ForCausalLM
QUANTIZED = re.compile(r"fp8|fp4|awq|gptq|int4|int8|w4a16|w8a8|bnb|gguf", re.I)


def _text(cfg: dict) -> dict:
    """The language model's part of a config (a VLM nests it in text_config)."""
    return cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg


def check(draft: dict, model: dict, *, method: str, k: int | None, model_dir: str,
          draft_dir: str) -> tuple[str | None, list[str], list[str]]:
    layer = draft.get("transformer_layer_config") if isinstance(draft.get("transformer_layer_config"), dict) \
        else draft
    target = _text(model)
    sc = draft.get("speculators_config") if isinstance(draft.get("speculators_config"), dict) else None
    d_name, m_name = f"the drafter {draft_dir}", f"the model {model_dir}"
    kind = draft.get("speculators_model_type") or (sc or {}).get("algorithm")
    if sc is not None and SPECULATOR_METHOD.get(kind, kind) != method:
        return (f"{d_name} is a speculators {kind!r} model (speculators_model_type), the plan's method is "
                f"{method!r}", [], [])
    if method == "eagle3" and layer.get("model_type") and layer["model_type"] not in EAGLE3_LAYERS:
        return (f"{d_name}'s draft layer is model_type {layer.get('model_type')!r}; vLLM's EAGLE-3 loads "
                f"{' or '.join(EAGLE3_LAYERS)} draft layers", [], [])
    hidden = draft.get("target_hidden_size") or layer.get("hidden_size")
    source = "target_hidden_size" if draft.get("target_hidden_size") else "hidden_size"
    if hidden and target.get("hidden_size") and hidden != target["hidden_size"]:
        return (f"{d_name} was trained for hidden size {hidden} ({source}), {m_name} has hidden size "
                f"{target['hidden_size']}", [], [])
    vocab, m_vocab = layer.get("vocab_size"), target.get("vocab_size")
    if vocab and m_vocab and vocab != m_vocab:
        return f"{d_name} has vocabulary size {vocab}, {m_name} has {m_vocab}", [], []
    dv = draft.get("draft_vocab_size")
    if dv and vocab and dv > vocab:
        return f"{d_name}'s draft_vocab_size {dv} is larger than its vocabulary {vocab}", [], []
    aux, layers = draft.get("eagle_aux_hidden_state_layer_ids") or [], target.get("num_hidden_layers")
    if aux and layers and max(aux) > layers:  # states 0..L: 0 the embeddings, i layer i's output (vLLM 0.28, 0.32)
        return (f"{d_name} reads hidden states of layer {max(aux)} (eagle_aux_hidden_state_layer_ids), {m_name} "
                f"has {layers} layers (states 0-{layers})", [], [])
    warnings, notes = [], []
    verifier = (sc or {}).get("verifier") if isinstance((sc or {}).get("verifier"), dict) else None
    if sc is None:
        notes.append(f"{d_name} is not in the speculators format (no speculators_config): its verifier and "
                     "trained depth were not checked")
    if verifier:
        v_name = os.path.basename(str(verifier.get("name_or_path") or "").rstrip("/"))
        served = os.path.basename(model_dir.rstrip("/"))
        if v_name and v_name.lower() != served.lower():
            warnings.append(f"{d_name} was trained for verifier {verifier.get('name_or_path')!r}, the served model "
                            f"is {served!r}: {VERIFIER_RULE}")
        archs, m_archs = verifier.get("architectures") or [], model.get("architectures") or []
        if archs and m_archs and not set(archs) & set(m_archs):
            warnings.append(f"{d_name}'s verifier architectures {archs} are not the served model's {m_archs}: "
                            + VERIFIER_RULE)
        if (model.get("quantization_config") or target.get("quantization_config")) and \
                not QUANTIZED.search(str(verifier.get("name_or_path") or "")):
            q = (model.get("quantization_config") or target.get("quantization_config") or {})
            warnings.append(f"the served model is quantized ({q.get('quant_method', 'quantization_config')}), "
                            f"{d_name}'s verifier {verifier.get('name_or_path')!r} is not: {VERIFIER_RULE}")
    depth = ((sc or {}).get("proposal_methods") or [{}])[0].get("speculative_tokens")
    if depth and k and depth != k:
        notes.append(f"{d_name} was trained to propose {depth} tokens (proposal_methods[0].speculative_tokens), "
                     f"the plan asks num_speculative_tokens {k}")
    return None, warnings, notes
