"""spec_bench loader with vLLM 0.32.0's rules (vllm/benchmarks/datasets/datasets.py).

- JSON Lines, requires `turns`; only `turns[0]`; `category` filter by exact match;
- shuffled with random.seed(0) (SpecBench gets no random_seed, so --seed is ignored) unless
  --disable-shuffle; first N (N <= 0: all);
- oversampled to N with random.seed(0) + random.choice per missing request unless --no-oversample;
- the chat template is applied client-side (skip_chat_template is not passed for spec_bench).

speed_bench with vLLM 0.32.0's SpeedBench rules: --dataset-path is a folder, the loader reads
<folder>/<--speed-bench-dataset-subset>.jsonl (pandas, lines=True), requires a `messages` column,
sends `messages[0]["content"]`, filters on `category` by exact match, shuffles with seed 0 (it gets
no random_seed either) unless --disable-shuffle, and templates on the client unless
--skip-chat-template (CustomDataset.sample).
specfleet-simvllm keeps each row's `category` with its sample and sends it to the simulated
server (header x-simvllm-category): the simulated acceptance depends on it (model.py).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, replace

from vllm.textsim import chat_template, count_tokens

DEFAULT_SEED = 0


@dataclass
class SampleRequest:
    prompt: str
    prompt_len: int
    expected_output_len: int
    request_id: str = ""
    category: str | None = None  # Spec-Bench category of the row (simulated engine only)


def load_spec_bench(path: str, category: str | None, disable_shuffle: bool) -> list[dict]:
    rows = _read_jsonl(path)
    if not rows or not all(isinstance(r, dict) and "turns" in r for r in rows):
        raise ValueError("JSONL file must contain a 'turns' column.")
    data = []
    for row in rows:
        if (not category) or category == row.get("category"):
            data.append({"prompt": row["turns"][0], "category": row.get("category")})
    random.seed(DEFAULT_SEED)
    if not disable_shuffle:
        random.shuffle(data)
    return data


def load_speed_bench(path: str | None, subset: str, category: str | None, disable_shuffle: bool) -> list[dict]:
    if path is None:
        raise ValueError("dataset_path must be provided for loading data.")
    if not os.path.isdir(path):
        raise ValueError(f"dataset_path {path} is not a directory. Please make sure to download the dataset "
                         "from HuggingFace")
    rows = _read_jsonl(os.path.join(path, f"{subset}.jsonl"))
    if not rows or not all(isinstance(r, dict) and "messages" in r for r in rows):
        raise ValueError("JSONL file must contain a 'messages' column.")
    data = [{"prompt": r["messages"][0]["content"], "category": r.get("category")} for r in rows
            if not category or category == r.get("category")]
    random.seed(DEFAULT_SEED)
    if not disable_shuffle:
        random.shuffle(data)
    return data


def sample(data: list[dict], num_requests: int, output_len: int, skip_chat_template: bool = False,
           no_oversample: bool = False, request_id_prefix: str = "") -> list[SampleRequest]:
    if num_requests <= 0:
        num_requests = len(data)
    out: list[SampleRequest] = []
    for i, item in enumerate(data):
        if len(out) >= num_requests:
            break
        prompt = item["prompt"]
        if not skip_chat_template:
            prompt = chat_template(prompt)
        cat = item.get("category")
        out.append(SampleRequest(prompt, count_tokens(prompt), output_len, request_id_prefix + str(i),
                                 cat if isinstance(cat, str) else None))
    if no_oversample:
        print(f"INFO: Skipping oversampling. Total samples: {len(out)}.")
    elif len(out) < num_requests and out:
        random.seed(DEFAULT_SEED)
        needed = num_requests - len(out)
        extra = [replace(random.choice(out), request_id=request_id_prefix + str(len(out) + i))
                 for i in range(needed)]
        out.extend(extra)
        print(f"INFO: Oversampled requests to reach {num_requests} total samples.")
    return out


def get_samples(args) -> list[SampleRequest]:
    if args.dataset_name == "spec_bench":
        if not args.dataset_path:
            raise ValueError("dataset_path must be provided for loading data.")
        data = load_spec_bench(args.dataset_path, args.spec_bench_category, args.disable_shuffle)
        return sample(data, args.num_prompts, args.spec_bench_output_len, skip_chat_template=False,
                      no_oversample=args.no_oversample)
    if args.dataset_name == "custom":
        if not args.dataset_path:
            raise ValueError("dataset_path must be provided for loading data.")
        data = []
        with open(args.dataset_path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    data.append({"prompt": row["prompt"]})
        random.seed(args.seed)  # CustomDataset(random_seed=args.seed), unlike SpecBench's fixed seed
        if not args.disable_shuffle:
            random.shuffle(data)
        return sample(data, args.num_prompts, args.custom_output_len, args.skip_chat_template,
                      args.no_oversample)
    if args.dataset_name == "speed_bench":
        data = load_speed_bench(args.dataset_path, args.speed_bench_dataset_subset, args.speed_bench_category,
                                args.disable_shuffle)
        return sample(data, args.num_prompts, args.speed_bench_output_len, args.skip_chat_template,
                      args.no_oversample)
    raise ValueError(f"specfleet-simvllm's `bench serve` supports --dataset-name spec_bench, custom and speed_bench only, "
                     f"not {args.dataset_name!r}")


def _read_jsonl(path: str) -> list:
    """The records of a JSONL file, blank lines skipped; a bad line is named as pandas' reader names it."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    raise ValueError(f"Expected object or value (line {lineno}): {e}") from e
    return rows
