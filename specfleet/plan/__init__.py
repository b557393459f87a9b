"""The plan file: what a benchmark campaign measures, validated before anything runs.

Every problem is one PlanError naming the file, the configuration (if any) and the field.
docs/campaign.md is the full reference (an example plan: plans/qwen3-32b.yml).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shlex
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError,
                      ValidationInfo, field_validator, model_validator)

from ..errors import UserError
from .assertions import Assertion
from .arrivals import rate_cells
from .crossover_grid import coarse_grid, fine_grid
from .releases import known_methods, known_speculative_keys, plan_problems, release_of, template_problem
from .slo import Slo
from ..worker.fitcheck import human_int
from ..worker.runspec import ENGINE_FLAGS, PARALLEL_FIELDS, SPEED_BENCH, SPEED_BENCH_SUBSETS
from ..yamlfile import YamlFileError, first_error, load_yaml
from .sweep import Cell, SweepError, bench_cells, expand_configurations

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")

# Flags the plan sets through its own fields; in server.args / extra_args they would conflict.
OWNED_FLAGS = {
    "--port": "server.port",
    "--host": "server.host",
    "--served-model-name": "model.served_name",
    "--speculative-config": "configurations[].speculative_config",
    "-sc": "configurations[].speculative_config",
    "--enable-prefix-caching": "server.prefix_cache",
    "--no-enable-prefix-caching": "server.prefix_cache",
}
REMOVED_FLAGS = {
    "--disable-log-requests": "removed in vLLM >= 0.12; use --no-enable-log-requests "
    "(default off anyway)",
}
# Speculative methods whose drafts come from a separate draft model directory. Which methods and
# keys a vLLM release has is its wheel's fact (releases.py, vllm_releases.json), not a list here.
DRAFT_MODEL_METHODS = {"eagle", "eagle3", "draft_model", "medusa", "mlp_speculator"}
NGRAM_METHODS = {"ngram", "ngram_gpu"}  # prompt lookup: no draft model, k and the lookup window


class PlanError(UserError):
    """A bad plan: one message naming file, configuration and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _argv(v: Any) -> list[str]:
    """A list of CLI words: a YAML list (numbers allowed) or one shell-like string."""
    if v is None:
        return []
    if isinstance(v, str):
        return shlex.split(v)
    if not isinstance(v, list):
        raise ValueError("must be a list of command-line words or one string")
    out = []
    for w in v:
        if isinstance(w, bool) or not isinstance(w, (str, int, float)):
            raise ValueError(f"{w!r} is not a command-line word (string or number)")
        out.append(str(w))
    return out


def _check_flags(words: list[str]) -> list[str]:
    for w in words:
        flag = w.split("=", 1)[0]
        if flag in REMOVED_FLAGS:
            raise ValueError(f"{flag} is {REMOVED_FLAGS[flag]}")
        if flag in OWNED_FLAGS:
            raise ValueError(f"{flag} is set by the plan field {OWNED_FLAGS[flag]}, not here")
    return words


# server.args and a configuration's extra_args: CLI words, checked against the flags the plan owns
Argv = Annotated[list[str], BeforeValidator(_argv), AfterValidator(_check_flags)]


# the engine fields' short flags (vLLM's FlexibleArgumentParser); the long ones: runspec.ENGINE_FLAGS
ENGINE_SHORT = {"-tp": "tensor_parallel_size", "-pp": "pipeline_parallel_size", "-dp": "data_parallel_size"}
_ENGINE_BY_FLAG = {flag: name for name, flag in ENGINE_FLAGS.items()}


def _engine_field(word: str) -> tuple[str | None, str | None]:
    """(the engine field a command-line word sets, its value when the word carries it: `--flag=V`)."""
    name, eq, value = word.partition("=")
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")   # vLLM reads --max_model_len as --max-model-len
    f = _ENGINE_BY_FLAG.get(name) or ENGINE_SHORT.get(name)
    return f, (value if eq else None)


def lift_engine_flags(words: list[str], where: str) -> tuple[dict[str, str], list[str]]:
    """The engine fields given as flags in `words` (the last one wins, as vLLM's argparse) and the
    words without them: the plan reads these flags once, here, into its typed fields."""
    found, rest, i = {}, [], 0
    while i < len(words):
        f, value = _engine_field(words[i])
        if f is None:
            rest.append(words[i])
            i += 1
            continue
        if value is None:
            if i + 1 >= len(words):
                raise ValueError(f"{where}: {words[i]} has no value")
            value, i = words[i + 1], i + 1
        found[f] = value
        i += 1
    return found, rest


def _engine_value(name: str, raw: Any, where: str) -> Any:
    """A typed engine field from the plan (a YAML value, or a flag's word): ValueError names `where`."""
    if name == "generation_config":
        if not isinstance(raw, str) or not raw.strip():
            raise ValueError(f"{where}: {raw!r} is not auto, vllm or a folder")
        return raw
    try:
        n = raw if isinstance(raw, int) and not isinstance(raw, bool) else \
            human_int(raw) if name == "max_model_len" and isinstance(raw, str) else \
            int(raw) if isinstance(raw, str) and raw.isdigit() else None
    except ValueError:
        n = None
    if n is None or n < 1:
        what = "a positive integer (2048, 2k, 2K)" if name == "max_model_len" else "a positive integer"
        raise ValueError(f"{where}: {raw!r} is not {what}")
    return n


class _EngineFields(_Strict):
    """The vLLM flags specfleet reads itself, as typed fields: the context length (the prompt-fit check),
    the parallel sizes (how many GPUs a server takes), where the sampling defaults come from. Written
    as fields, or as their flags in args (read once, here, into the field; both at once is refused).
    A configuration's value replaces the server's (Plan.engine)."""

    max_model_len: int | None = None            # None: the model's own; 2k (x1000) and 2K (x1024) as vLLM
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    generation_config: str | None = None        # auto (vLLM's default), vllm, or a folder
    _written_args: list[str] | None = PrivateAttr(default=None)  # args as written, flags and all (the hash)
    _lifted: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="before")
    @classmethod
    def _typed_engine(cls, d: Any) -> Any:
        if isinstance(d, dict):
            for name in ENGINE_FLAGS:
                if d.get(name) is not None:
                    d = {**d, name: _engine_value(name, d[name], name)}
        return d

    def _lift(self, args_field: str) -> None:
        words = getattr(self, args_field)
        found, rest = lift_engine_flags(words, args_field)
        for name, raw in found.items():
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: also given as {ENGINE_FLAGS[name]} in {args_field}; give it once "
                                 f"(the field {name}, or the flag)")
            setattr(self, name, _engine_value(name, raw, f"{args_field}: {ENGINE_FLAGS[name]}"))
        if found:
            self._written_args, self._lifted = list(words), tuple(found)
            setattr(self, args_field, rest)

    def as_hashed(self, d: dict, args_field: str) -> dict:
        """Its model_dump `d` as the plan hash reads it: flags read from args as written there (a plan
        written before the fields existed keeps its hash), fields left at None left out."""
        d = {k: v for k, v in d.items() if not (k in ENGINE_FLAGS and (v is None or k in self._lifted))}
        if self._written_args is not None:
            d[args_field] = list(self._written_args)
        return d


def _name(what: str):
    """A NAME_RE check for a name that names `what` on disk."""
    def check(v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"{v!r}: names may use letters, digits, '-', '_', '.' (it names {what})")
        return v
    return AfterValidator(check)


class Model(_Strict):
    name: str = Field(min_length=1)
    candidates: list[str] = Field(min_length=1)
    weights_gib: float = Field(gt=0)
    served_name: str = Field(default="bench", min_length=1)

    @field_validator("candidates")
    @classmethod
    def _abs(cls, v: list[str]) -> list[str]:
        for p in v:
            if not p.startswith("/"):
                raise ValueError(f"{p!r} is not an absolute path (the worker resolves it)")
        if len(set(v)) != len(v):
            raise ValueError("lists the same path twice")
        return v


class Server(_EngineFields):
    args: Argv = Field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    health_timeout_s: float = Field(default=2400, gt=0)
    health_poll_s: float = Field(default=5, gt=0)
    # keep: no reset between runs (the field report's setting: c=16 then reads c=1's cached prefixes)
    prefix_cache: Literal["reset", "fresh-server-per-concurrency", "disabled", "keep"] = "reset"

    @model_validator(mode="after")
    def _engine(self) -> "Server":
        self._lift("args")
        return self


def check_speculative_config(sc: dict[str, Any], extra_methods: list[str] = ()) -> dict[str, Any]:
    """Type checks of the keys vLLM reads (config/speculative.py), before a 10-minute load."""
    method = sc.get("method")
    if not isinstance(method, str) or not method:
        raise ValueError("needs 'method' (a string such as ngram or eagle3)")
    if method not in known_methods() and method not in extra_methods:
        raise ValueError(f"unknown method {method!r}: a method of no vLLM release in docs/vllm-releases.md "
                         "(a newer vLLM's method goes in speculative_extra_methods)")
    for key in ("num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
                "draft_tensor_parallel_size"):
        if key in sc and (isinstance(sc[key], bool) or not isinstance(sc[key], int) or sc[key] < 1):
            raise ValueError(f"{key} must be a positive integer, not {sc[key]!r}")
    if "model" in sc and (not isinstance(sc["model"], str) or not sc["model"]):
        raise ValueError(f"model must be a path string, not {sc['model']!r}")
    if method in NGRAM_METHODS:
        if "num_speculative_tokens" not in sc:
            raise ValueError("ngram needs num_speculative_tokens")
        lo, hi = sc.get("prompt_lookup_min"), sc.get("prompt_lookup_max")
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min {lo} is larger than prompt_lookup_max {hi}")
    if method in DRAFT_MODEL_METHODS and "model" not in sc:
        raise ValueError(f"{method} needs 'model' (the draft model directory)")
    return sc


class Configuration(_EngineFields):
    name: Annotated[str, _name("files")]
    # opt-ins for keys and methods no vLLM release of the matrix has (releases.py); validation only,
    # so not in the plan hash; the report says they were not checked
    speculative_extra_keys: list[str] = Field(default_factory=list, exclude=True)
    speculative_extra_methods: list[str] = Field(default_factory=list, exclude=True)
    speculative_config: dict[str, Any] | None = None
    extra_args: Argv = Field(default_factory=list)
    load_estimate_s: float | None = Field(default=None, gt=0)
    # placement (docs/campaign.md "Nodes with several GPUs"): only nodes whose GPU name contains this
    # (case-insensitive, e.g. H200); whole_node: the server has the node to itself, every GPU reserved
    gpu_model: str | None = Field(default=None, min_length=1)
    whole_node: bool = False

    @field_validator("speculative_config")
    @classmethod
    def _sc(cls, v: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        if v is None:
            return None
        unknown = sorted(set(v) - known_speculative_keys() - set(info.data.get("speculative_extra_keys") or []))
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}: a SpeculativeConfig field of no vLLM "
                             "release in docs/vllm-releases.md (a newer vLLM's key goes in speculative_extra_keys)")
        return check_speculative_config(v, info.data.get("speculative_extra_methods") or [])

    @model_validator(mode="after")
    def _engine(self) -> "Configuration":
        self._lift("extra_args")
        return self

    @property
    def method(self) -> str | None:
        return None if self.speculative_config is None else self.speculative_config["method"]


class OnWorker(_Strict):
    """A dataset that already lives on every worker, at this absolute path (not copied)."""

    on_worker: str


DATASET_RULE = ("a file on the bastion (a relative path is relative to the plan file's folder), "
                "or {on_worker: /absolute/path} for a file already on every worker")


class ConcurrencySearch(_Strict):
    """`concurrencies: {search: crossover, min: 1, max: 256, budget: 12}`: see specfleet/worker/crossover.py."""

    search: Literal["crossover"]
    min: int = Field(default=1, ge=1)
    max: int = Field(ge=2)
    coarse_factor: int = 4      # round 1: min x 4^k (and max)
    per_doubling: int = Field(default=2, ge=1, le=16)  # the finest grid: 2 points per doubling
    budget: int = Field(ge=2)   # concurrencies measured per configuration at most, round 1 included
    # goodput: each configuration's highest concurrency meeting benchmark.slo (worker/crossover.py)
    metric: Literal["output_throughput", "total_token_throughput", "goodput"] = "output_throughput"

    @field_validator("coarse_factor")
    @classmethod
    def _pow2(cls, v: int) -> int:
        if v < 2 or v & (v - 1):
            raise ValueError(f"must be a power of two (2, 4, 8, ...) so the coarse grid lies on the fine grid, not {v}")
        return v

    @model_validator(mode="after")
    def _range(self) -> "ConcurrencySearch":
        if self.max <= self.min:
            raise ValueError(f"max: {self.max} must be larger than min {self.min}")
        n = len(self.coarse())
        if self.budget < n:
            raise ValueError(f"budget: {self.budget} is fewer than the {n} concurrencies of the coarse grid "
                             f"{self.coarse()} (raise it, or raise coarse_factor)")
        return self

    def coarse(self) -> list[int]:
        return coarse_grid(self.min, self.max, self.coarse_factor)

    def fine(self) -> list[int]:
        return fine_grid(self.min, self.max, self.per_doubling)


# each rate is a cell at every concurrency, run by every configuration on every node: a plan that
# lists thousands would queue runs for years (and a plan file is input, hostile or mistyped)
MAX_REQUEST_RATES = 32


def steady_state_refusal(cell, min_per_conc: float, field_: str) -> str:
    """Why a cell is no steady state: its waves counted (prompts / concurrency: each wave one batch of
    `concurrency` requests, the last of which drains), and every honest way out (docs/campaign.md §8)."""
    need = math.ceil(min_per_conc * cell.concurrency)
    waves = cell.num_prompts / cell.concurrency
    what = "one wave that drains" if waves <= 1 else f"{waves:g} waves ({cell.num_prompts} / {cell.concurrency})"
    named = "" if cell.name == f"conc{cell.concurrency}" else f"(cell {cell.name}) "
    raise_ = (f"raise that sweep point's num_prompts to {need}" if field_ == "sweep.num_prompts" else
              f"raise num_prompts to {need}, or give concurrency {cell.concurrency} its own in a sweep point "
              f"({{concurrency: {cell.concurrency}, num_prompts: {need}}})")
    fewer = (f"; or accept {waves:g} waves on purpose: `min_prompts_per_concurrency: {math.floor(waves * 100) / 100:g}`"
             if waves > 1 else "")
    return (f"{field_}: {cell.num_prompts} prompts at concurrency {cell.concurrency} {named}is {what}, fewer than "
            f"the {min_per_conc:g} waves a steady state needs here (min_prompts_per_concurrency): {raise_}{fewer}; "
            "or say `steady_state: report-setup` to reproduce the field report's one-wave setup on purpose "
            "(stamped on every result)")


class Benchmark(_Strict):
    backend: Literal["openai-chat", "openai", "vllm"] = "openai-chat"
    endpoint: str = "/v1/chat/completions"
    # spec_bench: Spec-Bench's question.jsonl; custom: the user's own JSONL, one {"prompt": ...} a line
    # (vLLM's CustomDataset), sent in its file's order (docs/campaign.md "Your own prompts");
    # speed_bench: a SPEED-Bench subset's file, <subset>.jsonl of {"messages": [...], "category": ...}
    dataset_name: Literal["spec_bench", "custom", "speed_bench"] = "spec_bench"
    dataset_path: str | OnWorker    # DATASET_RULE; docs/campaign.md "Where the dataset lives"
    num_prompts: int = Field(default=80, ge=1)  # 5 x the default top concurrency 16: a steady state
    output_len: int = Field(default=512, ge=1)
    concurrencies: list[int] = Field(default_factory=lambda: [1, 16], min_length=1)
    # written as `concurrencies: {search: crossover, ...}`; concurrencies then holds its coarse grid
    concurrency_search: ConcurrencySearch | None = None
    # null: not sent, so the server's generation defaults (the model's generation_config.json) apply,
    # as in the field report (vLLM 0.28 without --temperature: Qwen3 sampled). Recorded either way.
    temperature: float | None = Field(default=0.0, ge=0)
    percentile_metrics: list[Literal["ttft", "tpot", "itl", "e2el"]] = Field(
        default_factory=lambda: ["ttft", "tpot", "itl", "e2el"])
    metric_percentiles: list[float] = Field(default_factory=lambda: [50, 90, 99])
    save_detailed: bool = True
    num_warmups: int = Field(default=1, ge=0)
    # Runs per (configuration, concurrency) on one server start, interleaved across concurrencies
    # (c1 c16 c1 c16 ...) so a slow drift hits every concurrency alike. The one default: 3.
    repeat: int = Field(default=3, ge=1)
    # How one repeat is kept apart from the next (docs/report.md, "What a repeat is"). server-start:
    # each repeat is its own server start, configurations interleaved (vanilla r1, cfg r1, vanilla r2,
    # ...), so the interval holds server-start and drift variance. cache-reset: all repeats on one
    # server start, back to back, server.prefix_cache between runs (how plans ran before the field
    # existed: not in the plan hash, nor with one run, so those plans keep their hash).
    repeat_isolation: Literal["server-start", "cache-reset"] = "server-start"
    # A run counts only if every request completed, or at most this many failed.
    max_failed_requests: int = Field(default=0, ge=0)
    # Checked on the worker before the model loads (its tokenizer, the chat template, output_len,
    # --max-model-len): refuse = the item fails naming the prompts and the fixes; drop = measure
    # without them, recorded in every result (prompts_dropped).
    prompts_that_do_not_fit: Literal["refuse", "drop"] = "refuse"
    # Steady state: a run at concurrency c needs num_prompts >= min_prompts_per_concurrency x c,
    # else it measures one wave that drains (throughput set by the last request). `report-setup`
    # waives the rule on purpose (the field report's 16 prompts at c=16) and stamps every result.
    min_prompts_per_concurrency: float = Field(default=5, ge=0)
    steady_state: Literal["required", "report-setup"] = "required"
    timeout_s: float = Field(default=7200, gt=0)
    # Required on purpose: see docs/campaign.md "The chat template question".
    chat_template: Literal["double", "single"]
    # Bench dimensions beyond the concurrencies (sweep.py, docs/campaign.md "Plans that sweep");
    # None = not in the plan hash, so a plan without sweeps keeps its hash
    sweep: dict[str, Any] | list[Any] | None = None
    # the latency a good request meets (slo.py, docs/slo.md); None = not in the plan hash
    slo: Slo | None = None
    # open-loop cells beside the concurrencies (arrivals.py); None = closed loop only, and with it
    # burstiness and seed are not in the plan hash
    request_rates: list[float] | None = Field(default=None, min_length=1, max_length=MAX_REQUEST_RATES)
    burstiness: float = Field(default=1.0, gt=0)
    seed: int = Field(default=0, ge=0)
    # counters: the server-wide spec_decode_* counters of each timed run (always). per_request: also
    # `vllm serve --per-request-spec-decode-metrics summary` for speculative configurations (vLLM >= 0.29,
    # releases.py refuses it under an older one) and, after the timed runs, an untimed pass of the
    # same prompts that keeps each response's acceptance (docs/report.md "Acceptance per request");
    # counters is not in the plan hash, so plans written before the field keep theirs
    spec_decode_metrics: Literal["counters", "per_request"] = "counters"
    _cells: list[Cell] = PrivateAttr(default_factory=list)

    @property
    def cells(self) -> list[Cell]:
        """The bench cells every configuration runs on its server, in plan order."""
        return self._cells

    @property
    def on_worker(self) -> str | None:
        """The dataset's path on the workers when the plan says it is already there, else None."""
        return self.dataset_path.on_worker if isinstance(self.dataset_path, OnWorker) else None

    @model_validator(mode="before")
    @classmethod
    def _search(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("concurrencies"), dict):
            if isinstance(data, dict) and data.get("concurrency_search") is not None:
                s = ConcurrencySearch.model_validate(data["concurrency_search"])
                if data.get("concurrencies") != s.coarse():  # a validated plan's dump reads back; nothing else
                    raise ValueError("concurrency_search: write `concurrencies: {search: crossover, ...}` instead")
            return data
        data = dict(data)
        try:
            search = ConcurrencySearch.model_validate(data["concurrencies"])
        except ValidationError as e:
            loc, msg = first_error(e)
            head = msg.split(" ")[0]
            if not loc and re.fullmatch(r"[a-z_]+:", head):  # ConcurrencySearch's cross-field errors
                loc, msg = (head[:-1],), msg[len(head) + 1:]
            raise ValueError(f"concurrencies.{'.'.join(map(str, loc))}: {msg}") from None
        data["concurrency_search"], data["concurrencies"] = search, search.coarse()
        return data

    @field_validator("dataset_path", mode="before")
    @classmethod
    def _dataset(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip():
            return v
        if isinstance(v, dict) and set(v) == {"on_worker"}:
            if not isinstance(v["on_worker"], str) or not v["on_worker"].startswith("/"):
                raise ValueError(f"on_worker: {v['on_worker']!r} is not an absolute path (the worker reads it)")
            return OnWorker(on_worker=v["on_worker"])
        raise ValueError(f"must be {DATASET_RULE}, not {v!r}")

    @field_validator("percentile_metrics", "metric_percentiles", mode="before")
    @classmethod
    def _csv(cls, v: Any) -> Any:
        return [x.strip() for x in v.split(",")] if isinstance(v, str) else v

    @field_validator("concurrencies")
    @classmethod
    def _conc(cls, v: list[int]) -> list[int]:
        if any(c < 1 for c in v) or len(set(v)) != len(v):
            raise ValueError("must be distinct positive integers")
        return v

    @model_validator(mode="after")
    def _steady(self) -> "Benchmark":
        try:
            self._cells = rate_cells(bench_cells(self.concurrencies, self.output_len, self.num_prompts, self.sweep),
                                     self.request_rates)
        except SweepError as e:
            raise ValueError(str(e).removeprefix("benchmark.")) from None
        if self.dataset_name == "custom":
            if any(c.category for c in self._cells):
                raise ValueError("sweep: a category cell is Spec-Bench's (--spec-bench-category); a custom dataset "
                                 "has no categories")
            path = self.on_worker or self.dataset_path
            if not str(path).endswith(".jsonl"):
                raise ValueError(f"dataset_path: {path} must end in .jsonl: vLLM's custom dataset reads JSON Lines "
                                 "files by that name only")
        if self.dataset_name == SPEED_BENCH:
            name = PurePosixPath(str(self.on_worker or self.dataset_path)).name
            if name.removesuffix(".jsonl") not in SPEED_BENCH_SUBSETS or not name.endswith(".jsonl"):
                raise ValueError(f"dataset_path: {name} is not a SPEED-Bench subset's file: vLLM's speed_bench "
                                 "loader reads <folder>/<subset>.jsonl, subset one of "
                                 f"{', '.join(SPEED_BENCH_SUBSETS)} (name the file; its folder is passed)")
        if self.request_rates is not None:
            if len(set(self.request_rates)) != len(self.request_rates) or not all(r > 0 for r in self.request_rates):
                raise ValueError("request_rates: must be distinct rates > 0 (requests/s; inf = closed loop)")
            if self.concurrency_search is not None:
                raise ValueError("request_rates: a crossover search does not combine with request rates yet")
        if self.concurrency_search is not None and self.concurrency_search.metric == "goodput":
            if self.slo is None:
                raise ValueError("concurrencies.metric: goodput needs benchmark.slo (the latency a good request meets)")
            if not self.save_detailed:
                raise ValueError("save_detailed: a goodput search reads the per-request arrays; set it to true")
        if self.concurrency_search is not None and self.sweep is not None:
            raise ValueError("sweep: a crossover search does not combine with bench sweeps yet; sweep server "
                             "dimensions (configurations[].sweep), or sweep on a concurrency grid")
        if self.concurrency_search is not None and self.steady_state == "required":
            if self.prompts_that_do_not_fit == "drop":  # the kept file would fix one prompt count for all
                raise ValueError("prompts_that_do_not_fit: drop does not go with a crossover search whose "
                                 "prompts scale with concurrency; use refuse, or steady_state: report-setup")
            return self  # the search raises num_prompts to min_prompts_per_concurrency x c per run
        # the rule holds per cell: the cell with the fewest prompts per concurrency decides
        cell = min(self._cells, key=lambda c: (c.prompts_per_concurrency, -c.concurrency))
        need = self.min_prompts_per_concurrency * cell.concurrency
        field_ = "num_prompts" if cell.num_prompts == self.num_prompts else "sweep.num_prompts"
        if self.steady_state == "required" and cell.num_prompts < need:
            raise ValueError(steady_state_refusal(cell, self.min_prompts_per_concurrency, field_))
        return self

    @model_validator(mode="after")
    def _template(self) -> "Benchmark":
        chat = self.backend == "openai-chat"
        if chat != self.endpoint.startswith("/v1/chat/"):
            raise ValueError(f"backend {self.backend} does not go with endpoint {self.endpoint}")
        if self.chat_template == "double" and not chat:
            raise ValueError("chat_template 'double' means backend openai-chat on /v1/chat/completions")
        # single on the chat backend: only a release whose client skips the template (releases.template_problem)
        return self


# equivalence.every_gpu: the baseline's run on GPU <N> of a node, a configuration name of the bastion's
# (its own item, results and done marker; the report's GPU check reads it, its tables leave it out; the
# worker sees only the item's gpu_pin). Plans may not name a configuration so.
GPU_COPY = "{baseline}.gpu{index}"


def gpu_copy(baseline: str, index: int) -> str:
    return GPU_COPY.format(baseline=baseline, index=index)


def copy_of(name: str, baseline: str) -> int | None:
    """The GPU index when `name` is the baseline's run on another GPU (gpu_copy), else None."""
    m = re.fullmatch(re.escape(baseline) + r"\.gpu(\d+)", name)
    return int(m.group(1)) if m else None


class Equivalence(_Strict):
    metric: str = "tpot_weighted_ms"   # the gate policy's metric (report/gates/gate_policy.py)
    concurrency: int = Field(default=16, ge=1)
    tolerance_pct: float = Field(default=3.0, gt=0)
    # packing shared on nodes with several GPUs: the baseline runs once on every GPU (gpu_copy),
    # so the gate compares the GPUs of a node as it compares nodes (one more baseline run per GPU)
    every_gpu: bool = False


class Collect(_Strict):
    """What `fab collect` takes from a worker (specfleet.collect.untrusted): each file's size limit.
    Not part of the plan hash: it changes nothing that is measured."""
    max_result_mb: float = Field(default=8, gt=0)   # a result, state.json, run.json, a done marker
    max_log_mb: float = Field(default=64, gt=0)     # a server log (vLLM is verbose at start)


class Plan(_Strict):
    campaign: Annotated[str, _name("a folder")]
    vllm_version: str | None = None
    model: Model
    server: Server = Field(default_factory=Server)
    configurations: list[Configuration] = Field(min_length=1)
    baseline: str
    benchmark: Benchmark
    equivalence: Equivalence = Field(default_factory=Equivalence)
    gpu_memory_free_mib: int = Field(default=5000, gt=0)
    stop_timeout_s: float = Field(default=120, gt=0)
    # exclusive: one server per node at a time (neighbours share host CPU, PCIe and memory bandwidth,
    # which skews what is compared); shared: one per free GPU set at once, stamped on every result
    packing: Literal["exclusive", "shared"] = "exclusive"
    collect: Collect = Field(default_factory=Collect)
    # figures the report must show (assertions.py); checks, not measurement settings: not in the plan hash
    assertions: list[Assertion] = Field(default_factory=list, exclude=True)
    _file: Path = PrivateAttr(default=Path("<plan>"))  # where it was read (not part of plan_hash)
    _sweeps: dict[str, dict] = PrivateAttr(default_factory=dict)  # sweep.expand_configurations
    _by_name: tuple | None = PrivateAttr(default=None)  # (configurations, name -> configuration): config()
    _release_problems: tuple | None = PrivateAttr(default=None)  # (configurations, releases.plan_problems per release)

    @model_validator(mode="after")
    def _cross(self) -> "Plan":
        names = [c.name for c in self.configurations]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"configurations: name {dup[0]!r} appears twice")
        if self.baseline not in names:
            raise ValueError(f"baseline: {self.baseline!r} is not a configuration (have: {', '.join(names)})")
        taken = [n for n in names if copy_of(n, self.baseline) is not None]
        if taken:
            raise ValueError(f"configurations: name {taken[0]!r} is the baseline's run on another GPU "
                             f"({GPU_COPY.format(baseline=self.baseline, index='<N>')}, equivalence.every_gpu); "
                             "choose another name")
        if self.equivalence.every_gpu:
            if self.packing != "shared":
                raise ValueError("equivalence.every_gpu: needs packing: shared (exclusive runs every server "
                                 "on the node's first free GPU, so there is nothing to compare)")
            if self.benchmark.concurrency_search is not None:
                raise ValueError("equivalence.every_gpu: does not combine with a crossover search yet")
        concs = sorted({c.concurrency for c in self.benchmark.cells})
        if self.equivalence.concurrency not in concs:
            raise ValueError(
                f"equivalence.concurrency: {self.equivalence.concurrency} is not among "
                f"the concurrencies measured {concs}"
            )
        for i, a in enumerate(self.assertions):
            if a.config not in names:
                raise ValueError(f"assertions.{i}.config: {a.config!r} is not a configuration (have: {', '.join(names)})")
        return self

    def config(self, name: str) -> Configuration:
        """The configuration named `name`; the baseline's run on another GPU (gpu_copy) is the
        baseline's."""
        if self.equivalence.every_gpu and copy_of(name, self.baseline) is not None:
            name = self.baseline
        # by name, not a linear search: the split and the run specs ask ~10 times per configuration
        # (516 configurations at 256 nodes); rebuilt when the list is replaced or grows
        cached = self._by_name
        if cached is None or cached[0] is not self.configurations or len(cached[1]) != len(self.configurations):
            index: dict[str, Configuration] = {}
            for c in self.configurations:
                index.setdefault(c.name, c)
            self._by_name = cached = (self.configurations, index)
        if name in cached[1]:
            return cached[1][name]
        raise KeyError(f"plan {self.campaign!r} has no configuration {name!r}")

    @property
    def file(self) -> Path:
        return self._file

    def dataset_file(self) -> Path | None:
        """The bastion file the dataset is (None: it is on the workers); PlanError when it is missing.

        A relative path is relative to the plan file's folder, so a plan means the same file
        wherever `fab` runs.
        """
        ds = self.benchmark.dataset_path
        if isinstance(ds, OnWorker):
            return None
        path = Path(os.path.expanduser(ds))
        path = path if path.is_absolute() else self._file.parent / path
        if not path.is_file() or not os.access(path, os.R_OK):
            why = "is not a readable file" if path.exists() else "does not exist"
            raise PlanError(f"{self._file}: field 'benchmark.dataset_path': {os.path.abspath(path)} {why} on "
                            "the bastion (a relative path is relative to the plan file; a file already on "
                            "the workers is written {on_worker: /path})")
        return path

    def canonical_json(self) -> str:
        d = self.model_dump(mode="json")
        del d["collect"]  # how collect fetches, not what is measured
        if d["benchmark"]["request_rates"] is None:  # closed loop only: the arrival fields mean nothing
            for key in ("request_rates", "burstiness", "seed"):
                del d["benchmark"][key]
        if d["benchmark"]["repeat"] == 1 or d["benchmark"]["repeat_isolation"] == "cache-reset":
            del d["benchmark"]["repeat_isolation"]
        for key in ("concurrency_search", "sweep", "slo"):  # absent: a plan without a search or sweep keeps its hash
            if d["benchmark"][key] is None:
                del d["benchmark"][key]
        if d["benchmark"]["spec_decode_metrics"] == Benchmark.model_fields["spec_decode_metrics"].default:
            del d["benchmark"]["spec_decode_metrics"]
        # placement fields left at their defaults are not hashed: a plan written before they existed
        # keeps its hash, so its campaign resumes (and its results merge) after an upgrade
        for key in [k for k in HASH_IF_SET if d.get(k) == HASH_IF_SET[k]]:
            del d[key]
        if d["equivalence"]["every_gpu"] == Equivalence.model_fields["every_gpu"].default:
            del d["equivalence"]["every_gpu"]
        d["server"] = self.server.as_hashed(d["server"], "args")
        d["configurations"] = [c.as_hashed(dc, "extra_args") for c, dc in zip(self.configurations,
                                                                               d["configurations"])]
        for c in d["configurations"]:
            for key in [k for k in CONFIG_HASH_IF_SET if c.get(k) == CONFIG_HASH_IF_SET[k]]:
                del c[key]
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def sweeps(self) -> dict[str, dict]:
        """Expanded configuration name -> {"from": the swept configuration, "point": its values}."""
        return self._sweeps

    def plan_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:12]


HASH_IF_SET = {"packing": Plan.model_fields["packing"].default}
CONFIG_HASH_IF_SET = {k: Configuration.model_fields[k].default for k in ("gpu_model", "whole_node")}


def engine(plan: Plan, config: str) -> dict[str, Any]:
    """The engine fields one server of `config` gets: the configuration's, else the server's (None: vLLM's)."""
    c, s = plan.config(config), plan.server
    return {name: getattr(c, name) if getattr(c, name) is not None else getattr(s, name) for name in ENGINE_FLAGS}


def gpus_needed(plan: Plan, config: str) -> int:
    """GPUs one server of `config` uses: its tensor x pipeline x data parallel size (1 each when not set)."""
    return math.prod(v or 1 for k, v in engine(plan, config).items() if k in PARALLEL_FIELDS)


def _where(loc: tuple, file: Path, raw: Any) -> str:
    parts = list(loc)
    if len(parts) >= 2 and parts[0] == "configurations" and isinstance(parts[1], int):
        name = f"#{parts[1] + 1}"
        try:
            entry = raw["configurations"][parts[1]]
            if isinstance(entry, dict) and entry.get("name"):
                name = repr(entry["name"])
        except (KeyError, IndexError, TypeError):
            pass
        field_ = ".".join(str(p) for p in parts[2:]) or "(entry)"
        return f"{file}: configuration {name}, field {field_!r}"
    return f"{file}: field {'.'.join(str(p) for p in parts) or '(top level)'!r}"


def parse_plan(raw: Any, file: str | os.PathLike = "<plan>") -> Plan:
    file = Path(file)
    if not isinstance(raw, dict):
        raise PlanError(f"{file}: expected a mapping with 'campaign:', 'model:', ... at the top level")
    try:
        raw, sweeps = expand_configurations(raw, known_speculative_keys())
    except SweepError as e:
        head, msg = str(e).split(": ", 1)
        raise PlanError(f"{_where(tuple(int(p) if p.isdigit() else p for p in head.split('.')), file, raw)}: "
                        f"{msg}") from None
    try:
        plan = Plan.model_validate(raw)
    except ValidationError as e:
        loc, msg = first_error(e)
        head = msg.split(" ")[0]
        if re.fullmatch(r"[a-z_.0-9]+:", head):  # cross-field errors carry their field first
            loc, msg = (*loc, *head[:-1].split(".")), msg[len(head) + 1:]
        raise PlanError(f"{_where(loc, file, raw)}: {msg}") from None
    _refuse_no_stats(plan, file)
    plan._file = file
    plan._sweeps = sweeps
    rel = release_of(plan.vllm_version)
    if rel is not None:  # the pinned release lacks a flag, key, method or dataset: refused before anything starts
        problems = [line for lines in plan_problems(plan, rel).values() for line in lines]
        if problems:
            raise PlanError(problems[0])
    elif line := template_problem(plan, None):  # the chat template of no known release
        raise PlanError(line)
    return plan


def _refuse_no_stats(plan: Plan, file: Path) -> None:
    """--disable-log-stats stops vLLM's spec-decode counters: acceptance would read "never fired"."""
    for c in plan.configurations:
        if c.speculative_config is None:
            continue
        for where, words in (("server.args", plan.server.args), ("extra_args", c.extra_args)):
            if "--disable-log-stats" in words:
                raise PlanError(f"{file}: configuration {c.name!r}, field {where!r}: --disable-log-stats removes "
                                "vLLM's spec-decode counters (acceptance could not be measured); remove it")


def load_plan(path: str | os.PathLike) -> Plan:
    file = Path(path)
    if not file.is_file():
        raise PlanError(f"{file}: plan file not found (plans/ holds examples)")
    try:
        raw = load_yaml(file)
    except YamlFileError as e:
        raise PlanError(str(e)) from None
    return parse_plan(raw, file)
