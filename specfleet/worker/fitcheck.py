#!/usr/bin/env python3
"""Does every selected prompt fit the server's context? Run by the runner with the venv's python.

    <venv>/bin/python runner.pyz fitcheck --model DIR --fit FIT_JSON [--write-kept FILE]

FIT_JSON is the run spec's `fit` of one bench run (dataset, num_prompts, output_len, chat_template
double|single, optional category and max_model_len such as 2048 or 2k). It selects, templates and
counts the prompts as `vllm bench serve` and the server will (docs/campaign.md §9; the selection:
vLLM's spec_bench loader, vllm/benchmarks/datasets/datasets.py), compares prompt tokens +
output_len with --max-model-len and prints one JSON object. --write-kept writes the selected
prompts that fit, in selection order, for a run with --disable-shuffle (the plan's `drop`).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys

SPEC_BENCH_SEED = 0  # SpecBench takes no seed: always DEFAULT_SEED (vLLM's benchmarks/datasets/datasets.py)
CHAT_BACKEND = "openai-chat"  # the bench backend on /v1/chat/completions: its server templates the message


def applied_template(chat_template: str, backend: str) -> str:
    """Where the chat template is applied to a prompt: client+server (double: up to vLLM 0.33 the bench
    client templates and the chat server templates again), server (single on the chat backend: 0.34's
    client leaves the message to the server), client (single on /v1/completions: sent as templated)."""
    if chat_template == "double":
        return "client+server"
    return "server" if backend == CHAT_BACKEND else "client"


def human_int(text: str) -> int:
    """--max-model-len accepts 2048, 2k (x1000), 2K (x1024), like vLLM's human_readable_int."""
    t = str(text).strip()
    mult = {"k": 1000, "m": 1000 ** 2, "g": 1000 ** 3, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(t)


# the run spec's fit names a dataset's prompt field where it is not Spec-Bench's turns[0]
PROMPT_FIELD = {"custom": "prompt", "speed_bench": "messages"}


def prompt_of(row: dict, field: str | None) -> str:
    """The text vLLM's loader takes from a record: custom's `prompt`, SpeedBench's first message's
    `content`, SpecBench's first turn."""
    return row["prompt"] if field == "prompt" else row["messages"][0]["content"] if field == "messages" \
        else row["turns"][0]


def select(path: str, num_prompts: int, category: str | None = None,
           custom: bool = False) -> list[tuple[dict, str]]:
    """(row, raw line) of the prompts vllm bench serve sends, in its order: --spec-bench-category
    (--speed-bench-category) filters the rows before the seeded shuffle (SpecBench.load_data; SpeedBench
    is built without random_seed too), then the first N. A custom dataset (`custom`: the run spec's fit
    says so) is sent in its file's order (--disable-shuffle)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                if not category or row.get("category") == category:
                    rows.append((row, line.rstrip("\n")))
    if not custom:
        random.seed(SPEC_BENCH_SEED)
        random.shuffle(rows)
    return rows if num_prompts <= 0 else rows[:num_prompts]


def engine_identity() -> dict:
    """The venv's engine's own identity file (specfleet-engine.json beside its __init__.py), {} when it has none; read,
    not imported: the real vLLM imports torch."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.origin:
        return {}
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "specfleet-engine.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def fast_tokenizer(model: str):
    """The same counts as transformers' AutoTokenizer without importing transformers (which imports
    torch: seconds per runner preflight on a GPU host): the model's tokenizer.json through the
    `tokenizers` library and its chat template through jinja2, compiled as transformers compiles it
    (sandboxed, trim_blocks, lstrip_blocks, loopcontrols). None when the model dir or the venv lacks them."""
    try:
        import jinja2.ext
        import jinja2.sandbox
        from tokenizers import Tokenizer
    except ImportError:
        return None
    tj, cj = os.path.join(model, "tokenizer.json"), os.path.join(model, "chat_template.jinja")
    try:
        with open(os.path.join(model, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        source = cfg.get("chat_template")
        if not isinstance(source, str) and os.path.isfile(cj):
            with open(cj, encoding="utf-8") as f:
                source = f.read()
        tok = Tokenizer.from_file(tj)
    except Exception:  # noqa: BLE001 - an unreadable or unknown tokenizer file: the transformers path
        return None
    if not isinstance(source, str):
        return None

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, **k: json.dumps(x, indent=indent, ensure_ascii=False)
    env.globals["raise_exception"] = raise_exception
    compiled = env.from_string(source)
    special = {k: v for k, v in cfg.items() if k.endswith("_token") and isinstance(v, str)}

    def template(text: str) -> str:
        return compiled.render(messages=[{"role": "user", "content": text}], add_generation_prompt=True, **special)

    def count(text: str, special_tokens: bool) -> int:
        return len(tok.encode(text, add_special_tokens=special_tokens).ids)
    return f"tokenizers + jinja2 ({model})", template, count


def tokenizer(model: str):
    """(name, template(text) -> str, count(text, special_tokens) -> int)."""
    ident = engine_identity()
    if ident.get("prompt_tokens"):  # an engine that counts with its own tokenizer, whatever the model dir holds
        mod = importlib.import_module(ident["prompt_tokens"])
        kind = " (simulated engine)" if ident.get("simulated") else ""
        return (f"{ident.get('name', 'engine')} {ident['prompt_tokens']}{kind}", mod.chat_template,
                lambda t, special: mod.count_tokens(t))
    if os.environ.get("SPECFLEET_FITCHECK_TRANSFORMERS") != "1" and (fast := fast_tokenizer(model)):
        return fast
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise SystemExit(f"cannot count prompt tokens: transformers is not in this venv ({e})") from None
    tok = AutoTokenizer.from_pretrained(model)

    def template(text: str) -> str:
        return tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                       tokenize=False)

    def count(text: str, special: bool) -> int:
        return len(tok(text, add_special_tokens=special)["input_ids"])
    return f"transformers AutoTokenizer ({model})", template, count


def model_max_len(model: str) -> int:
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    return int(cfg.get("max_position_embeddings") or 40960)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--fit", required=True, type=json.loads, help="the run spec's fit of one bench run (JSON)")
    ap.add_argument("--write-kept", default=None)
    a = ap.parse_args(argv)
    fit = a.fit
    limit = human_int(fit["max_model_len"]) if fit.get("max_model_len") else model_max_len(a.model)
    name, template, count = tokenizer(a.model)
    too_long, kept = [], []
    custom = fit.get("prompt_field") == "prompt"   # a custom dataset: {"prompt": ...}, in file order
    # the lane adds the client's backend; without it, single is /v1/completions (before 0.34 the only one)
    on = applied_template(fit["chat_template"], fit.get("backend") or
                          (CHAT_BACKEND if fit["chat_template"] == "double" else "openai"))
    rows = select(fit["dataset"], int(fit["num_prompts"]), fit.get("category"), custom)
    record = {}   # a record without question_id is named by its number in the file, not by the shuffle's order
    if fit.get("prompt_field"):
        with open(fit["dataset"], encoding="utf-8") as f:
            for n, line in enumerate((ln.rstrip("\n") for ln in f if ln.strip()), 1):
                record.setdefault(line, n)
    for index, (row, line) in enumerate(rows):
        raw = prompt_of(row, fit.get("prompt_field"))
        # client+server: the chat server templates the client's templated text again; server: the
        # message as it is (0.34's client skips the template); client: sent to /v1/completions as templated
        n = count(template(template(raw)), False) if on == "client+server" else \
            count(template(raw), False) if on == "server" else count(template(raw), True)
        if n + fit["output_len"] > limit:
            too_long.append({"index": index, "question_id": row.get("question_id", f"record {record[line]}"
                                                                    if record else None),
                             "prompt_tokens": n,
                             "category": row.get("category")})
        else:
            kept.append(line)
    if a.write_kept and too_long:
        tmp = a.write_kept + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(ln + "\n" for ln in kept))
        os.replace(tmp, a.write_kept)
    print(json.dumps({"tokenizer": name, "max_model_len": limit, "output_len": fit["output_len"],
                      "selected": len(kept) + len(too_long), "kept": len(kept), "too_long": too_long}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
