#!/usr/bin/env python3
"""Generate a tiny Qwen3-architecture model directory for the real vLLM CPU tier.

Run it with the vLLM venv's interpreter (the ``tokenizers`` library comes with vLLM):

    VENV/bin/python testbed/realvllm/tiny_model.py --dataset question.jsonl --out DIR

Writes ``config.json`` (Qwen3ForCausalLM, 2 layers, hidden 128, 4 heads, 2 KV heads, head_dim
32, vocab 4096), ``tokenizer.json`` (byte-level BPE trained in seconds on the dataset's
``turns[0]`` texts), ``tokenizer_config.json`` (Qwen-style ``chat_template``) and
``generation_config.json``. There are no weights: serve it with ``--load-format dummy``.
The output is a toy: random weights, so no acceptance rate or speedup means anything.

``--eagle3-out DIR`` also writes an EAGLE-3 drafter for it: a ``config.json`` in the speculators
layout (:func:`eagle3_drafter_config`), again without weights (the drafter takes the server's
``--load-format dummy`` too), served with ``--speculative-config '{"model": DIR}'``.

Only this module's :func:`write_tiny_model` needs ``tokenizers``; the rest is stdlib so the test
tier can import the constants with any interpreter.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
VOCAB_SIZE = 4096

#: Qwen2/Qwen3-style ChatML template (no tools, no thinking block).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def model_config(vocab_size: int = VOCAB_SIZE, dtype: str = "float32",
                 max_position_embeddings: int = 4096) -> dict:
    """HF ``config.json`` of the toy model (ids: 0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|>)."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_position_embeddings,
        "max_window_layers": 2,
        "use_sliding_window": False,
        "sliding_window": None,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": True,
        "use_cache": True,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "torch_dtype": dtype,
    }


def tokenizer_config(model_max_length: int = 2048) -> dict:
    added = {
        str(i): {"content": tok, "lstrip": False, "normalized": False, "rstrip": False,
                 "single_word": False, "special": True}
        for i, tok in enumerate(SPECIAL_TOKENS)
    }
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "split_special_tokens": False,
        "chat_template": CHAT_TEMPLATE,
    }


#: The target layers whose hidden states the tiny drafter reads. A 2-layer model has no (2, L/2, L-3)
#: of the real checkpoints; vLLM's Qwen3 model hands out ids 0..L (0 = the embeddings, i = the output
#: of layer i-1), and specfleet's drafter check (specfleet/worker/drafter.py) allows 0..L-1.
EAGLE3_AUX_LAYERS = (0, 1)


def eagle3_drafter_config(target: dict | None = None, verifier: str = "specfleet/tiny-qwen3",
                          k: int = 3) -> dict:
    """An EAGLE-3 drafter's ``config.json`` for the toy model, in the speculators layout (the one
    RedHatAI/Qwen3-32B-speculator.eagle3 publishes; testbed/seed.py writes the simulated one):
    one draft layer of the target's width and vocabulary (draft vocabulary = full vocabulary, so
    no d2t table is needed), trained (nominally) for ``verifier``, proposing ``k`` tokens.

    The draft layer is ``qwen3``, not the published ``llama``: vLLM's Eagle3Llama sizes its input
    projection from ``eagle_config`` (3 aux states unless it says otherwise) while the target reads
    the top-level ``eagle_aux_hidden_state_layer_ids``; Eagle3Qwen3 reads the top-level ids too, so
    the two aux states of a 2-layer target agree with it."""
    t = target or model_config()
    layer = {key: t[key] for key in ("hidden_size", "intermediate_size", "num_attention_heads",
                                     "num_key_value_heads", "head_dim", "max_position_embeddings",
                                     "vocab_size", "rms_norm_eps", "rope_theta", "tie_word_embeddings")}
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.1.0.dev13",
        "transformer_layer_config": {**layer, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
                                     "num_hidden_layers": 1, "hidden_act": "silu",
                                     "attention_bias": False, "torch_dtype": t["torch_dtype"]},
        "draft_vocab_size": t["vocab_size"],
        "target_hidden_size": None,
        "norm_before_residual": False,
        "eagle_aux_hidden_state_layer_ids": list(EAGLE3_AUX_LAYERS),
        "torch_dtype": t["torch_dtype"],
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": k,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": verifier, "architectures": list(t["architectures"])},
        },
    }


def write_eagle3_drafter(out: str | Path, target: dict | None = None) -> Path:
    """Write the drafter directory ``out`` (config.json only: ``--load-format dummy``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(eagle3_drafter_config(target), indent=2) + "\n")
    return out


def generation_config() -> dict:
    """Qwen-like sampling defaults; the tests pass ``--temperature 0`` to get greedy decoding."""
    return {
        "bos_token_id": 0,
        "eos_token_id": [2, 0],
        "pad_token_id": 0,
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "repetition_penalty": 1.0,
    }


def dataset_texts(dataset: str | Path) -> list[str]:
    """``turns[0]`` of every JSONL row (what vLLM's spec_bench loader sends)."""
    texts = []
    with open(dataset, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            row = json.loads(line)
            turns = row.get("turns") or []
            if turns and isinstance(turns[0], str):
                texts.append(turns[0])
    if not texts:
        raise ValueError(f"no turns[0] texts in {dataset}")
    return texts


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE):
    """Byte-level BPE (GPT-2/Qwen style) trained on ``texts``; returns a tokenizers.Tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    for i, s in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    return tok


def write_tiny_model(out: str | Path, dataset: str | Path, *, vocab_size: int = VOCAB_SIZE,
                     dtype: str = "float32", max_model_len: int = 2048) -> Path:
    """Write the model directory ``out`` (created if needed); returns its path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(dataset_texts(dataset), vocab_size)
    tok.save(str(out / "tokenizer.json"))
    real_vocab = tok.get_vocab_size()
    if real_vocab > vocab_size:
        raise ValueError(f"tokenizer has {real_vocab} tokens > vocab_size {vocab_size}")

    def dump(name: str, obj: dict) -> None:
        (out / name).write_text(json.dumps(obj, indent=2) + "\n")

    dump("config.json", model_config(vocab_size, dtype, max(4096, max_model_len)))
    dump("tokenizer_config.json", tokenizer_config(max_model_len))
    dump("special_tokens_map.json", {
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    dump("generation_config.json", generation_config())
    (out / "README.md").write_text(
        "Toy model generated by specfleet testbed/realvllm/tiny_model.py.\n"
        "No weights: serve with `--load-format dummy`. Numbers from it mean nothing.\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Generate the tiny Qwen3 model directory.")
    ap.add_argument("--dataset", required=True, help="JSONL with a `turns` list per row")
    ap.add_argument("--out", required=True, help="model directory to write")
    ap.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--eagle3-out", help="also write an EAGLE-3 drafter (speculators layout) there")
    a = ap.parse_args(argv)
    path = write_tiny_model(a.out, a.dataset, vocab_size=a.vocab_size, dtype=a.dtype,
                            max_model_len=a.max_model_len)
    print(path)
    if a.eagle3_out:
        target = json.loads((path / "config.json").read_text())
        print(write_eagle3_drafter(a.eagle3_out, target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
