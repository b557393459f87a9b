"""The result file of `vllm bench serve --save-result` as a pydantic model.

Keys follow vLLM 0.32.0 (`vllm/benchmarks/serve.py`); keys that older releases
do not write (`failed`, `latencies`, `queue_times`, `rtfx`, `max_*`,
`start_times`) are optional, as are the per-request arrays (only with
`--save-detailed`) and the `spec_decode_*` keys (absent for vanilla servers or
when no draft was made). Unknown keys are kept: `--metadata KEY=VALUE` adds
top-level string keys (`node`, `config`, `vllm_version`, `plan_hash`, ...) and
the simulated engine adds `simulated`, `engine`, `simulated_time_scale`.

`load_result(path)` raises one `ResultError` naming the file and the problem;
`incomplete(result, asked, max_failed)` says why a valid file still does not count
(fewer requests completed than the plan asked for).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from .. import untrusted_json
from ..worker.runner import RESULT_KEYS  # every result's required keys: the runner checks them too

SPEC_KEYS = (
    "spec_decode_acceptance_rate",
    "spec_decode_acceptance_length",
    "spec_decode_num_drafts",
    "spec_decode_draft_tokens",
    "spec_decode_accepted_tokens",
)
# Metadata keys we read for provenance (all optional, values are strings).
PROVENANCE_KEYS = (
    "node", "config", "vllm_version", "torch_version", "gpu", "driver",
    "driver_version", "cuda_version", "plan_hash", "campaign", "engine", "engine_version",
    "engine_identity",  # the engine the worker observed (runner.bench_metadata; provenance.engine_of)
)


class ResultError(Exception):
    """A result file that cannot be used; the message names file and problem."""

    def __init__(self, path: Path | str, problem: str):
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class Result(BaseModel):
    """One `--save-result` JSON object. Extra keys are allowed and kept."""

    model_config = ConfigDict(extra="allow")

    # header
    date: str | None = None
    backend: str | None = None
    endpoint_type: str | None = None
    label: str | None = None
    model_id: str | None = None
    tokenizer_id: str | None = None
    num_prompts: int | None = None
    # traffic
    request_rate: float | None = None
    burstiness: float | None = None
    max_concurrency: int | None = None
    # totals
    duration: float
    completed: int
    failed: int | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    request_throughput: float | None = None
    request_goodput: float | None = None
    output_throughput: float
    total_token_throughput: float
    max_output_tokens_per_s: float | None = None
    max_concurrent_requests: int | None = None
    rtfx: float | None = None
    # latency stats (means required; others optional)
    mean_ttft_ms: float
    median_ttft_ms: float | None = None
    std_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    mean_tpot_ms: float
    median_tpot_ms: float | None = None
    std_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    mean_itl_ms: float
    median_itl_ms: float | None = None
    std_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    # per-request arrays
    latencies: list[float] | None = None
    queue_times: list[float] | None = None
    start_times: list[float] | None = None
    input_lens: list[int] | None = None
    output_lens: list[int] | None = None
    ttfts: list[float] | None = None
    itls: list[list[float]] | None = None
    generated_texts: list[str] | None = None
    errors: list[str] | None = None
    # speculative decoding (absent when nothing was drafted)
    spec_decode_acceptance_rate: float | None = None
    spec_decode_acceptance_length: float | None = None
    spec_decode_num_drafts: int | None = None
    spec_decode_draft_tokens: int | None = None
    spec_decode_accepted_tokens: int | None = None
    spec_decode_per_position_acceptance_rates: list[float] | None = None

    @field_validator("request_rate", mode="before")
    @classmethod
    def _rate(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
            return math.inf
        return v

    @property
    def extra(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @property
    def simulated(self) -> bool:
        v = self.extra.get("simulated")
        return v is True or (isinstance(v, str) and v.strip().lower() in ("true", "1", "yes"))

    @property
    def has_spec(self) -> bool:
        return self.spec_decode_num_drafts is not None

    @property
    def has_detail(self) -> bool:
        return self.ttfts is not None and self.output_lens is not None

    def metadata(self) -> dict[str, str]:
        """The provenance keys present (from `--metadata` or the engine)."""
        return {k: str(v) for k in PROVENANCE_KEYS if (v := self.extra.get(k)) is not None}


def _describe(err: ValidationError) -> str:
    missing, bad = [], []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        if e["type"] == "missing":
            missing.append(key)
        else:
            bad.append(f"key '{key}': {e['msg']} (got {e.get('input')!r:.40})")
    parts = []
    if missing:
        parts.append("missing required key(s): " + ", ".join(missing))
    parts.extend(bad[:5])
    return "; ".join(parts)


def parse_result(data: Any, path: Path | str = "<memory>") -> Result:
    """Validate an already-decoded JSON value."""
    if not isinstance(data, dict):
        raise ResultError(path, f"top level is {type(data).__name__}, expected a JSON object")
    missing = [k for k in RESULT_KEYS if k not in data]
    if missing:
        raise ResultError(path, "missing required key(s): " + ", ".join(missing))
    try:
        res = Result.model_validate(data)
    except ValidationError as e:
        raise ResultError(path, _describe(e)) from None
    for k in RESULT_KEYS:
        v = getattr(res, k)
        if not math.isfinite(v) or v < 0:
            raise ResultError(path, f"key '{k}' is {v!r}, expected a finite number >= 0")
    if res.completed == 0:
        raise ResultError(path, "completed == 0: no request finished, nothing to measure")
    if res.duration <= 0:
        raise ResultError(path, f"duration is {res.duration!r}, expected > 0")
    if why := contradiction(res):
        raise ResultError(path, f"fields contradict each other: {why}")
    return res


def contradiction(res: Result) -> str | None:
    """Why a result's fields cannot all be true (issue 23: such a file is quarantined, never merged)."""
    n = res.num_prompts
    if n is not None and n > 0 and res.completed + (res.failed or 0) > n:
        return (f"completed {res.completed} + failed {res.failed or 0} > num_prompts {n}")
    for key in ("latencies", "ttfts", "start_times"):  # the model made every element a float
        if bad := [v for v in getattr(res, key) or [] if v < 0]:
            return f"'{key}' holds a negative duration ({bad[0]!r})"
    if any(v < 0 for row in res.itls or [] for v in row):
        return "'itls' holds a negative duration"
    if res.latencies and res.ttfts and len(res.latencies) == len(res.ttfts):
        for i, (la, t) in enumerate(zip(res.latencies, res.ttfts)):
            if la > 0 and t > la + 1e-9:
                return f"request {i}: TTFT {t!r} s > its latency {la!r} s"
    counters = {k: getattr(res, f"spec_decode_{k}") for k in ("num_drafts", "draft_tokens", "accepted_tokens")}
    for k, v in counters.items():
        if v is not None and v < 0:
            return f"spec_decode_{k} is {v} (a counter differenced over the run went down)"
    d, dt, acc = counters["num_drafts"], counters["draft_tokens"], counters["accepted_tokens"]
    if dt is not None and acc is not None and acc > dt:
        return f"spec_decode_accepted_tokens {acc} > spec_decode_draft_tokens {dt}"
    if d is not None and dt is not None and d > dt:
        return f"spec_decode_num_drafts {d} > spec_decode_draft_tokens {dt} (a draft proposes >= 1 token)"
    pos = res.spec_decode_per_position_acceptance_rates or []
    for i in range(1, len(pos)):
        if pos[i] > pos[i - 1] + 1e-9:
            return (f"spec_decode_per_position_acceptance_rates rises at position {i} ({pos[i - 1]:g} -> {pos[i]:g}): "
                    "a token is accepted only after every earlier one of its draft")
    return None


def failure_cause(errors: list[str] | None) -> str | None:
    """The first distinct cause in vLLM's per-request `errors` list ("" = that request succeeded):
    a traceback's last line (the exception), else the message on one line; "+N other cause(s)"."""
    causes: list[str] = []
    for e in errors or []:
        if not isinstance(e, str) or not e.strip():
            continue
        lines = [ln.strip() for ln in e.strip().splitlines() if ln.strip()]
        cause = lines[-1] if lines[0].startswith("Traceback") else " ".join(lines)
        if cause not in causes:
            causes.append(cause)
    if not causes:
        return None
    first = causes[0] if len(causes[0]) <= 240 else causes[0][:239] + "…"
    return first + (f" (+{len(causes) - 1} other cause(s))" if len(causes) > 1 else "")


def _dropped(res: Result) -> int:
    """How many selected prompts the runner dropped before the run (they did not fit the context)."""
    try:
        return max(0, int(getattr(res, "prompts_dropped", 0) or 0))
    except (TypeError, ValueError):
        return 0


def incomplete(res: Result, asked: int | None = None, max_failed: int = 0) -> str | None:
    """Why a valid result does not count as a run, or None: more than `max_failed` of the `asked`
    requests (the plan's num_prompts; else the file's own, when positive) did not complete."""
    if asked is None and res.num_prompts is not None and res.num_prompts > 0:
        asked = res.num_prompts
    elif asked is not None and (dropped := _dropped(res)):
        asked -= dropped  # the plan said `prompts_that_do_not_fit: drop`: the runner sent the rest
    failed = res.failed or 0
    if asked is not None:
        failed = max(failed, asked - res.completed)
    if failed <= max_failed:
        return None
    of = f" of {asked}" if asked is not None else ""
    cause = failure_cause(res.errors) or ("no cause recorded (vLLM keeps `errors` only with --save-detailed)"
                                          if res.errors is None else "no cause recorded")
    # requests the client made: one `errors` entry each, else completed + failed (vLLM >= 0.30 writes
    # `failed`); fewer than asked, with nothing failed to account for them, were never sent
    sent = len(res.errors) if res.errors is not None else \
        (res.completed + res.failed if res.failed is not None else None)
    if asked is not None and sent is not None and sent < asked and sent - res.completed <= max_failed:
        if res.num_prompts == sent:  # vLLM records the CLI's --num-prompts: the run itself asked for fewer
            return (f"{asked - sent} of {asked} requests were never sent: the run asked for {sent} (its "
                    f"num_prompts; completed {res.completed}) where the plan asks {asked}")
        return (f"{asked - sent} of {asked} requests were never sent: the client made {sent} (completed "
                f"{res.completed}), so the dataset had {sent} prompts for this run where the plan asks "
                f"{asked} (--no-oversample sends each prompt once): give num_prompts <= the dataset's prompts, "
                "or a dataset with more")
    return (f"{failed}{of} requests failed or were not sent (completed {res.completed}; "
            f"the plan allows {max_failed}): {cause}")


def load_result(path: Path | str) -> Result:
    """Read and validate one result file; raise ResultError naming file and problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ResultError(path, f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ResultError(path, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not text.strip():
        raise ResultError(path, "empty file")
    try:
        data = untrusted_json.loads(text)
    except json.JSONDecodeError as e:
        hint = " (truncated?)" if e.pos >= len(text.rstrip()) - 1 else ""
        raise ResultError(path, f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}{hint}") from None
    except untrusted_json.UntrustedJSON as e:
        raise ResultError(path, str(e)) from None
    return parse_result(data, path)
