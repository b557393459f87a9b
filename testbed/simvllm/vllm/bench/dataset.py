"""spec_bench loader with vLLM 0.32.0's rules (vllm/benchmarks/datasets/datasets.py).

- JSON Lines, requires `turns`; only `turns[0]`; `category` filter by exact match;
- shuffled with random.seed(0) (SpecBench gets no random_seed, so --seed is ignored) unless
  --disable-shuffle; first N (N <= 0: all);
- oversampled to N with random.seed(0) + random.choice per missing request unless --no-oversample;
- the chat template is applied client-side (skip_chat_template is not passed for spec_bench).
specfleet-simvllm keeps each row's `category` with its sample and sends it to the simulated
server (header x-simvllm-category): the simulated acceptance depends on it (model.py).
"""

from __future__ import annotations

import json
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
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise ValueError(f"Expected object or value (line {lineno}): {e}") from e
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
    raise ValueError(f"specfleet-simvllm's `bench serve` supports --dataset-name spec_bench and custom only, "
                     f"not {args.dataset_name!r}")
