"""Plan time: does the plan's bastion dataset hold the prompts its runs ask for?

The runner checks the same on the worker before a model loads (worker runner fit_bench, worker fitcheck.select);
this check reads the bastion file once, before any host is touched, so a plan that cannot run fails
in one line instead of failing every item on every worker. A dataset already on the workers
({on_worker: ...}) is not on the bastion: its count is the runner's check alone.
"""
from __future__ import annotations

import json
from collections import Counter

from .commands import num_prompts
from ..plan import Plan, PlanError

SPEC_BENCH_FULL = "the full Spec-Bench question.jsonl (480 prompts; hemingkx/Spec-Bench data/spec_bench/question.jsonl)"


def needs(plan: Plan) -> list[tuple[int, str | None, str]]:
    """(prompts, category, where) of every run shape: the item's (its largest concurrency's; a crossover
    search also its max) and every cell that names its own num_prompts or category."""
    b = plan.benchmark
    concs = list(b.concurrencies) + ([b.concurrency_search.max] if b.concurrency_search else [])
    out = [(max(num_prompts(plan, c) for c in concs), None, "benchmark.num_prompts")]
    for cell in b.cells:
        n = cell.num_prompts if cell.num_prompts != b.num_prompts else out[0][0]
        if cell.category or cell.num_prompts != b.num_prompts:
            out.append((n, cell.category, f"bench cell {cell.name}"))
    return out


KINDS = {"custom": "a custom dataset has one {\"prompt\": ...} object a line",
         "speed_bench": "a SPEED-Bench subset file has one {\"messages\": [...], \"category\": ...} object a line",
         "spec_bench": "a Spec-Bench question.jsonl has one object a line"}


def count(path, dataset: str = "spec_bench") -> tuple[int, Counter]:
    """Prompts in a JSON Lines dataset, in all and per category (as fitcheck.select reads it); a custom
    or speed_bench file's records each validated as vLLM's loader reads them."""
    total, per = 0, Counter()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise PlanError(f"{path}: line {n} is not JSON ({KINDS[dataset]})") from None
            if dataset == "custom":
                bad_record(path, n, row)
            elif dataset == "speed_bench":
                bad_speed_record(path, n, row)
            total += 1
            per[row.get("category") if isinstance(row, dict) else None] += 1
    return total, per


def bad_record(path, n: int, row) -> None:
    """PlanError naming file, line and field when a custom dataset's record is not one vLLM can send."""
    if not isinstance(row, dict):
        raise PlanError(f"{path}: line {n}: not a JSON object (a custom dataset has one {{\"prompt\": ...}} object a line)")
    prompt = row.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise PlanError(f"{path}: line {n}, field 'prompt': {'missing' if 'prompt' not in row else repr(prompt)[:60]}: "
                        "must be the prompt text (a non-empty string)")
    out = row.get("output_tokens")
    if out is not None and (isinstance(out, bool) or not isinstance(out, int) or out < 1):
        raise PlanError(f"{path}: line {n}, field 'output_tokens': {out!r}: must be a positive integer when given "
                        "(specfleet sends benchmark.output_len for every prompt, --custom-output-len)")


def bad_speed_record(path, n: int, row) -> None:
    """PlanError naming file, line and field when a SPEED-Bench record is not one vLLM's SpeedBench
    loader can send: it sends `messages[0].content` as the user's prompt and filters on `category`."""
    if not isinstance(row, dict):
        raise PlanError(f"{path}: line {n}: not a JSON object ({KINDS['speed_bench']})")
    msgs = row.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise PlanError(f"{path}: line {n}, field 'messages': {'missing' if 'messages' not in row else repr(msgs)[:60]}"
                        ": must be a non-empty list of {\"role\", \"content\"} messages (vLLM sends the first one's content)")
    content = msgs[0].get("content") if isinstance(msgs[0], dict) else None
    if not isinstance(content, str) or not content.strip():
        raise PlanError(f"{path}: line {n}, field 'messages[0].content': {repr(content)[:60]}: must be the prompt "
                        "text (a non-empty string)")
    cat = row.get("category")
    if cat is not None and not isinstance(cat, str):
        raise PlanError(f"{path}: line {n}, field 'category': {cat!r}: must be a string when given "
                        "(--speed-bench-category matches it exactly)")


def check(plan: Plan) -> None:
    """PlanError (one line: plan file, field, what the dataset holds, the fix) when a run asks for more
    prompts than the bastion dataset holds. Nothing to check for a dataset already on the workers."""
    path = plan.dataset_file()
    if path is None:
        return
    total, per = count(path, plan.benchmark.dataset_name)
    for n, category, where in needs(plan):
        have = per.get(category, 0) if category else total
        if have < n:
            of = f" of category {category}" if category else ""
            fix = SPEC_BENCH_FULL if plan.benchmark.dataset_name == "spec_bench" else "a larger file"
            raise PlanError(f"{plan.file}: field '{where}': a run asks for {n} prompts{of}, {path} holds {have}: "
                            f"point benchmark.dataset_path at {fix}, or lower num_prompts")
