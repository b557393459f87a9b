"""Prometheus counters of the simulated engine, rendered like vLLM's /metrics."""

from __future__ import annotations

import threading
import time


class Metrics:
    def __init__(self, model_name: str, spec_k: int, spec_enabled: bool):
        self.lock = threading.Lock()
        self.model_name = model_name
        self.spec_enabled = spec_enabled
        self.spec_k = spec_k
        self.created = time.time()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success = {"stop": 0, "length": 0, "abort": 0, "error": 0}
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted = 0
        self.accepted_per_pos = [0] * spec_k
        self.running = 0
        self.waiting = 0
        self.kv_usage = 0.0
        self.iterations = 0

    def record_draft(self, k: int, accepted: int) -> None:
        if not self.spec_enabled:
            return
        self.num_drafts += 1
        self.num_draft_tokens += k
        self.num_accepted += accepted
        for i in range(min(accepted, len(self.accepted_per_pos))):
            self.accepted_per_pos[i] += 1

    def render(self) -> str:
        lbl = f'engine="0",model_name="{self.model_name}"'
        out: list[str] = [
            "# SIMULATED metrics of specfleet-simvllm (no GPU, no model): numbers of its documented model (vllm/model.py)",
        ]

        def counter(name: str, help_: str, rows: list[tuple[str, float]]) -> None:
            out.append(f"# HELP {name}_total {help_}")
            out.append(f"# TYPE {name}_total counter")
            for labels, value in rows:
                out.append(f"{name}_total{{{labels}}} {float(value)}")
            out.append(f"# HELP {name}_created {help_}")
            out.append(f"# TYPE {name}_created gauge")
            for labels, _ in rows:
                out.append(f"{name}_created{{{labels}}} {self.created}")

        def gauge(name: str, help_: str, value: float) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} gauge")
            out.append(f"{name}{{{lbl}}} {float(value)}")

        with self.lock:
            gauge("vllm:num_requests_running", "Number of requests in model execution batches.", self.running)
            gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", self.waiting)
            gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", self.kv_usage)
            counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [(lbl, self.prompt_tokens)])
            counter("vllm:generation_tokens", "Number of generation tokens processed.",
                    [(lbl, self.generation_tokens)])
            counter("vllm:request_success", "Count of successfully processed requests.",
                    [(f'{lbl},finished_reason="{r}"', v) for r, v in self.success.items()])
            if self.spec_enabled:
                counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
                        [(lbl, self.num_drafts)])
                counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                        [(lbl, self.num_draft_tokens)])
                counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                        [(lbl, self.num_accepted)])
                counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                        "Accepted tokens per draft position.",
                        [(f'{lbl},position="{i}"', v) for i, v in enumerate(self.accepted_per_pos)])
        return "\n".join(out) + "\n"


def parse_spec_decode(text: str) -> dict | None:
    """What `vllm bench serve` reads from /metrics: vllm:spec_decode*_total, summed over labels."""
    found = False
    res = {"num_drafts": 0.0, "num_draft_tokens": 0.0, "num_accepted_tokens": 0.0, "per_pos": {}}
    for line in text.splitlines():
        if not line.startswith("vllm:spec_decode") or line.startswith("#"):
            continue
        try:
            name_labels, value = line.rsplit(" ", 1)
            val = float(value)
        except ValueError:
            continue
        name = name_labels.split("{", 1)[0]
        if not name.endswith("_total"):
            continue
        found = True
        if name == "vllm:spec_decode_num_drafts_total":
            res["num_drafts"] += val
        elif name == "vllm:spec_decode_num_draft_tokens_total":
            res["num_draft_tokens"] += val
        elif name == "vllm:spec_decode_num_accepted_tokens_total":
            res["num_accepted_tokens"] += val
        elif name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
            pos = None
            for part in name_labels.split("{", 1)[1].rstrip("}").split(","):
                if part.startswith("position="):
                    pos = int(part.split("=", 1)[1].strip('"'))
            if pos is not None:
                res["per_pos"][pos] = res["per_pos"].get(pos, 0.0) + val
    return res if found else None
