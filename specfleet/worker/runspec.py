"""The run spec, typed: run.json (`RunSpec`: its envelope, `Item`s, `Fit`, `Crossover`, `Gpu`s), the
runner's state records (`ItemState`, `RunState`: state.json), and the one place the argv of `vllm
serve` and `vllm bench serve` is rendered. Stdlib only; part of the worker program.

The bastion builds these dataclasses (specfleet/campaign/commands.py, spec.py) and writes them through
`to_json`; the runner reads run.json once (`RunSpec.load`: every field checked against its type, a bad
one refused in one line naming it) and uses attributes from then on. It renders the argv with what
only the worker knows (the model folder, the engine version, its server's port, the prompts the fit
check kept, the GPUs); the printed plan renders the same argv with the placeholders layout.MODEL and
layout.VLLM_VERSION. Nothing edits an argv after it is rendered, and nothing reads one back.
"""
from __future__ import annotations

import hashlib
import json
import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, replace

from .layout import MODEL, VLLM_VERSION


def _num(x: float) -> str:
    """A number as the plan wrote it: 16, not 16.0."""
    return str(int(x)) if float(x).is_integer() else str(x)


_LEAVES = (str, int, float, bool, type(None))
CUSTOM = "custom"   # --dataset-name custom: the user's JSONL of {"prompt": ...}, its own output-len flag
SPEC_SCHEMA = 2     # run.json's schema: 2 has the typed engine fields (max_model_len, parallel sizes, ...)
PACKINGS = ("exclusive", "shared")   # the plan's packing (its default there): one server at a time, or several
# --dataset-name speed_bench (vLLM's SpeedBench): --dataset-path is a folder, the loader reads its
# <subset>.jsonl (records with `messages`); specfleet names the subset's file and passes its folder
SPEED_BENCH = "speed_bench"
SPEED_BENCH_SUBSETS = ("qualitative", "throughput_1k", "throughput_2k", "throughput_8k", "throughput_16k",
                       "throughput_32k")   # --speed-bench-dataset-subset's choices, 0.26.0-0.34.0 alike


def dataset_path_args(dataset_name: str, path: str) -> list[str]:
    """--dataset-path: speed_bench reads <folder>/<subset>.jsonl, so the file's folder and its subset."""
    if dataset_name != SPEED_BENCH:
        return ["--dataset-path", path]
    folder, name = path.rsplit("/", 1) if "/" in path else (".", path)
    return ["--dataset-path", folder or "/", "--speed-bench-dataset-subset", name.removesuffix(".jsonl")]


def dataset_len_args(dataset_name: str, output_len: int, category: str | None) -> list[str]:
    """The dataset's own output-length and category flags (spec_bench's, custom's, speed_bench's)."""
    prefix = {CUSTOM: "--custom", SPEED_BENCH: "--speed-bench"}.get(dataset_name, "--spec-bench")
    # the loader filters by category before its seed-0 shuffle: the first num_prompts of that category
    has = category and dataset_name != CUSTOM   # a custom file has no categories (the plan refuses them)
    return [f"{prefix}-output-len", str(output_len), *([f"{prefix}-category", category] if has else [])]


class SpecError(ValueError):
    """A run spec that does not hold together: one line naming the field (`items[1].serve.port`)."""


def _plain(v):
    """A field's value as JSON types, containers copied (asdict's result for the types a spec holds)."""
    t = type(v)
    if t in _LEAVES:
        return v
    if t is list or t is tuple:
        return t(x if type(x) in _LEAVES else _plain(x) for x in v)
    if t is dict:
        return {k: x if type(x) in _LEAVES else _plain(x) for k, x in v.items()}
    if isinstance(v, _Json):
        return v.to_json()
    return v


_KINDS: dict[type, tuple[tuple[str, bool], ...]] = {}
_HINTS: dict[type, dict] = {}


def _field_kinds(cls) -> tuple[tuple[str, bool], ...]:
    """(field name, whether it is left out at None: an optional field of a lean class), once per class."""
    if cls not in _KINDS:
        _KINDS[cls] = tuple((f.name, cls.LEAN and f.default is None) for f in fields(cls))
    return _KINDS[cls]


def _at(where: str, name: str | int) -> str:
    return f"{where}[{name}]" if isinstance(name, int) else f"{where}.{name}" if where else name


def _what(v) -> str:
    text = json.dumps(v) if type(v) in _LEAVES else type(v).__name__
    return text if len(text) <= 40 else text[:37] + "..."


_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "an object", list: "a list"}


def _typed(v, tp, where: str):
    """`v` (parsed JSON) as the annotation `tp` says, the _Json parts built; SpecError names `where`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        if v is None and type(None) in args:
            return None
        (tp,) = [a for a in args if a is not type(None)]   # the spec's unions are `X | None`
        origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and issubclass(tp, _Json):
        return tp.from_json(v, where)
    base = origin or tp
    if base is typing.Any:
        return v
    ok = (isinstance(v, (int, float)) and not isinstance(v, bool) if base is float else
          isinstance(v, int) and not isinstance(v, bool) if base is int else isinstance(v, base))
    if not ok:
        raise SpecError(f"field {where!r}: expected {_NAMES.get(base, base.__name__)}, got {_what(v)}")
    if base is list and args:
        return [_typed(x, args[0], _at(where, i)) for i, x in enumerate(v)]
    if base is dict and args:
        return {k: _typed(x, args[1], _at(where, k)) for k, x in v.items()}
    return v


class _Json:
    """JSON on the wire: a dataclass from its dict, every field checked against its annotation
    (unknown keys refused, by name); `check` adds a class's own rules."""

    LEAN = True   # to_json leaves out an optional field at None (False: every field, as state.json always had)

    def to_json(self) -> dict:
        """Its dict; an optional field left at None is left out (a plain plan's items stay lean).
        What dataclasses.asdict gives (containers copied), without its deepcopy of every leaf: a
        256-node Slurm submission builds ~3,000 of these (benchmarks/slurm_scale.py)."""
        out = {}
        for name, optional in _field_kinds(type(self)):
            v = getattr(self, name)
            if v is not None or not optional:
                out[name] = _plain(v)
        return out

    @classmethod
    def from_json(cls, d, where: str = ""):
        if not isinstance(d, dict):
            raise SpecError(f"{f'field {where!r}' if where else cls.__name__}: expected an object, got {_what(d)}")
        if cls not in _HINTS:
            _HINTS[cls] = typing.get_type_hints(cls)
        hints, kw = _HINTS[cls], {}
        unknown = sorted(set(d) - set(hints))
        if unknown:
            raise SpecError(f"{f'field {where!r}' if where else cls.__name__}: unknown key(s) {', '.join(unknown)}")
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name in d:
                kw[f.name] = _typed(d[f.name], hints[f.name], _at(where, f.name))
            elif f.default is MISSING and f.default_factory is MISSING:
                raise SpecError(f"field {_at(where, f.name)!r}: missing")
        out = cls(**kw)
        out.check(where)
        return out

    def check(self, where: str) -> None:
        """A class's own rules beyond the types (SpecError naming the field)."""


def _positive(obj, where: str, *names: str) -> None:
    for name in names:
        v = getattr(obj, name)
        if v is not None and v < 1:
            raise SpecError(f"field {_at(where, name)!r}: must be at least 1, not {v}")


# the engine's fields specfleet reads itself (the plan's typed fields, plan._EngineFields): field -> its vLLM flag
ENGINE_FLAGS = {"max_model_len": "--max-model-len", "tensor_parallel_size": "--tensor-parallel-size",
                "pipeline_parallel_size": "--pipeline-parallel-size", "data_parallel_size": "--data-parallel-size",
                "generation_config": "--generation-config"}
PARALLEL_FIELDS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
PER_REQUEST_FLAG = "--per-request-spec-decode-metrics"   # vLLM >= 0.29 (plan/releases.py refuses it before)


@dataclass(frozen=True)
class Serve(_Json):
    """One configuration's server: `<vllm> serve <model> --served-model-name ... --host --port ...`.

    The engine's fields specfleet reads itself (the context length the fit check measures against,
    the parallel sizes that say how many GPUs a server takes, where its sampling defaults come from)
    are typed here, from the plan's fields (server, overridden per configuration), and rendered once
    by `options`; they are never read back from an argv."""

    vllm: str                                   # <venv>/bin/vllm
    served_name: str
    server_args: list[str]                      # the plan's server.args, less the engine fields
    prefix_caching: bool = True                 # False: --no-enable-prefix-caching
    speculative_config: dict | None = None
    extra_args: list[str] = field(default_factory=list)  # the configuration's extra_args, last
    max_model_len: int | None = None            # None: the model's own (config.json)
    tensor_parallel_size: int | None = None     # None: vLLM's 1
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    generation_config: str | None = None        # None: vLLM's `auto` (the model's generation_config.json)
    # benchmark.spec_decode_metrics: per_request, on a speculative server: `summary` (its flag, last); the
    # lane's untimed acceptance pass runs where it is set (acceptance.py)
    per_request_spec_decode_metrics: str | None = None

    def check(self, where: str) -> None:
        _positive(self, where, "max_model_len", *PARALLEL_FIELDS)

    def engine_args(self) -> list[str]:
        """The typed engine fields as vLLM's flags, in ENGINE_FLAGS order (a field left at None: no flag)."""
        return [w for name, flag in ENGINE_FLAGS.items() if (v := getattr(self, name)) is not None
                for w in (flag, str(v))]

    def options(self) -> list[str]:
        """The words after `--port N`: what the plan asks of the server."""
        spec = [] if self.speculative_config is None else \
            ["--speculative-config", json.dumps(self.speculative_config, separators=(",", ":"))]
        per_request = self.per_request_spec_decode_metrics
        return [*self.server_args, *self.engine_args(),
                *([] if self.prefix_caching else ["--no-enable-prefix-caching"]), *spec, *self.extra_args,
                *([PER_REQUEST_FLAG, per_request] if per_request else [])]

    def argv(self, *, model: str | None, host: str, port: int) -> list[str]:
        return [self.vllm, "serve", model or MODEL, "--served-model-name", self.served_name,
                "--host", host, "--port", str(port), *self.options()]

    def gpus_needed(self) -> int:
        """GPUs one server uses: tensor x pipeline x data parallel size (1 each when not set)."""
        return math.prod(getattr(self, f) or 1 for f in PARALLEL_FIELDS)

    def sampling_source(self) -> str:
        """Where the server's sampling defaults come from: `auto` (the model's generation_config.json),
        `vllm` (vLLM's own) or a folder holding a generation_config.json."""
        return self.generation_config or "auto"


@dataclass(frozen=True)
class Client(_Json):
    """What every bench run of one item shares (the plan's `benchmark:` as the worker sends it)."""

    vllm: str
    backend: str
    endpoint: str
    served_name: str
    dataset_name: str
    dataset_path: str
    result_dir: str
    temperature: float | None
    percentile_metrics: list[str]
    metric_percentiles: list[float]
    num_warmups: int
    save_detailed: bool
    repeats: int
    burstiness: float
    seed: int
    goodput_ms: dict[str, float] = field(default_factory=dict)  # benchmark.slo: {"ttft": 2000, ...}
    # --metadata KEY=VALUE pairs in order (node, config, plan_hash, vllm_version, campaign, the run's
    # setup); a vllm_version of None is the version the runner read in preflight
    metadata: list[list[str | None]] = field(default_factory=list)

    def sampling(self) -> dict[str, str]:
        """The sampling parameters the client sends, as on its command line."""
        return {} if self.temperature is None else {"temperature": _num(self.temperature)}


@dataclass(frozen=True)
class Dropped(_Json):
    """The fit check's answer under `prompts_that_do_not_fit: drop`: the run reads the kept prompts."""

    kept_file: str
    kept: int
    selected: int
    ids: list[int]


@dataclass(frozen=True)
class BenchRun(_Json):
    """One `vllm bench serve` run of an item: a cell at one repeat."""

    concurrency: int
    rep: int
    num_prompts: int
    output_len: int
    result_file: str
    category: str | None = None
    request_rate: float | None = None           # an open-loop cell (arrivals.py); None: closed loop
    cell: str | None = None                     # a swept cell's name (sweep.py); None: conc<N>
    fit: CellFit | None = None                  # where this cell's prompts differ from the item's fit
    dropped: Dropped | None = None

    def check(self, where: str) -> None:
        _positive(self, where, "concurrency", "rep", "output_len")

    def prompts(self) -> int:
        """Prompts the run sends: the cell's, or those the fit check kept."""
        return self.dropped.kept if self.dropped else self.num_prompts

    def setup(self, client: Client) -> list[list[str]]:
        """This run's own --metadata pairs (the report reads how a run was set up from its result)."""
        return [*([["repeat", str(self.rep)]] if client.repeats > 1 or self.rep > 1 else []),  # a gate run: rep > 1
                ["prompts_per_concurrency", f"{self.num_prompts / self.concurrency:g}"],
                *([["category", self.category]] if self.category else []),
                *([["arrival_seed", str(client.seed)]] if self.request_rate is not None else [])]

    def argv(self, client: Client, *, model: str | None, vllm_version: str | None, host: str, port: int,
             result_filename: str | None = None, metadata: list[list[str]] = ()) -> list[str]:
        """The run's argv; `result_filename` other than result_file: where the client writes first
        (the runner's .partial), `metadata`: the runner's own pairs, appended."""
        d = self.dropped
        pairs = [[k, (vllm_version or VLLM_VERSION) if k == "vllm_version" and v is None else v]
                 for k, v in client.metadata]
        pairs += self.setup(client)
        if d:
            pairs += [["prompts_dropped", str(len(d.ids))], ["prompts_dropped_ids", ",".join(map(str, d.ids))],
                      ["prompts_selected", str(d.selected)]]
        c = client
        return [
            c.vllm, "bench", "serve",
            "--backend", c.backend,
            "--base-url", f"http://{host}:{port}",
            "--endpoint", c.endpoint,
            "--model", c.served_name,
            "--tokenizer", model or MODEL,       # the served name is not a HF repo id (report §3.3)
            "--dataset-name", c.dataset_name,
            *dataset_path_args(c.dataset_name, d.kept_file if d else c.dataset_path),
            "--num-prompts", str(self.prompts()),
            "--no-oversample",
            # the kept file is in selection order; a custom file is read in its own order (fitcheck.select)
            *(["--disable-shuffle"] if d or c.dataset_name == CUSTOM else []),
            *dataset_len_args(c.dataset_name, self.output_len, self.category),
            # an open-loop cell has no cap: a request held back by the client's semaphore waits outside
            # its TTFT (coordinated omission); unbounded, every arrival reaches the server on time
            *(["--request-rate", _num(self.request_rate), "--burstiness", _num(c.burstiness), "--seed", str(c.seed)]
              if self.request_rate is not None else ["--max-concurrency", str(self.concurrency)]),
            *(["--temperature", _num(c.temperature)] if c.temperature is not None else []),
            "--percentile-metrics", ",".join(c.percentile_metrics),
            "--metric-percentiles", ",".join(_num(p) for p in c.metric_percentiles),
            "--num-warmups", str(c.num_warmups),
            *(["--save-detailed"] if c.save_detailed else []),
            *(["--goodput", *(f"{k}:{_num(v)}" for k, v in c.goodput_ms.items())] if c.goodput_ms else []),
            "--save-result",
            "--result-dir", c.result_dir,
            "--result-filename", result_filename or self.result_file,
            # --metadata takes the rest of the line: it comes last
            "--metadata", *(f"{k}={v}" for k, v in [*pairs, *metadata]),
        ]


@dataclass(frozen=True)
class CellFit(_Json):
    """Where one swept cell's prompts differ from its item's `fit` (sweep.py); None: the item's."""

    num_prompts: int | None = None
    output_len: int | None = None
    category: str | None = None


@dataclass(frozen=True)
class Fit(_Json):
    """What the prompt-fit check (fitcheck.py, with the venv's python) needs: every selected prompt +
    output_len must fit max_model_len (None: the model's), else `policy` (refuse or drop)."""

    dataset: str
    num_prompts: int
    output_len: int
    max_model_len: int | None
    chat_template: str | None
    policy: str
    prompt_field: str | None = None             # a custom dataset's field (Spec-Bench: turns)
    category: str | None = None                 # a cell's category (CellFit)
    backend: str | None = None                  # the client's: where the chat template is applied (the lane's)

    def of_cell(self, cell: CellFit | None) -> "Fit":
        """This fit for one bench cell: the cell's own prompts where it has them."""
        if cell is None:
            return self
        return replace(self, **{k: v for k, v in ((f.name, getattr(cell, f.name)) for f in fields(cell))
                                if v is not None})


@dataclass(frozen=True)
class Item(_Json):
    """One queue item: a server start of a configuration and the bench runs it serves."""

    name: str
    serve: Serve
    client: Client
    bench: list[BenchRun]
    required_paths: list[str]
    max_failed_requests: int                    # the plan's benchmark.max_failed_requests (its default there)
    temperature: float | None                   # what the client sends (None: the server's defaults)
    fit: Fit | None = None                      # None: no prompt-fit check
    config: str | None = None                   # the configuration, when the name is a repeat's or a round's
    log_name: str | None = None                 # the server log's name (the configuration's), else the name
    item_hash: str | None = None                # what its done marker must match
    release_refusals: dict[str, str] | None = None  # vLLM release -> the one line refusing this item under it
    whole_node: bool | None = None              # True: the server has the node to itself
    gpu_pin: int | None = None                  # equivalence.every_gpu: the baseline's run on this GPU

    # set after the hash (the same measurement whatever the matrix or the node's GPUs say)
    NOT_HASHED = ("item_hash", "release_refusals", "whole_node", "gpu_pin")

    def check(self, where: str) -> None:
        if not self.bench:
            raise SpecError(f"field {_at(where, 'bench')!r}: no bench run")
        if self.max_failed_requests < 0:
            raise SpecError(f"field {_at(where, 'max_failed_requests')!r}: must be >= 0")

    @property
    def configuration(self) -> str:
        return self.config or self.name

    @property
    def server_log_name(self) -> str:
        return self.log_name or self.name

    def hashed(self, leave_out: tuple[str, ...] = NOT_HASHED) -> "Item":
        """This item with its item_hash: of its JSON less `leave_out` (those set after the hash)."""
        d = {k: v for k, v in self.to_json().items() if k not in leave_out}
        return replace(self, item_hash=hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12])


@dataclass(frozen=True)
class Slo(_Json):
    """benchmark.slo as a goodput search judges a point: limits (ttft_ms, tpot_ms, e2el_ms) and the share."""

    limits: dict[str, float]
    attainment_pct: float


@dataclass(frozen=True)
class Crossover(_Json):
    """What the runner's crossover rounds need (crossover.py); the grids and each point's prompts are
    the bastion's (specfleet/plan/crossover_grid.py)."""

    grid: list[int]
    coarse: list[int]
    prompts: dict[str, int]                     # str(concurrency) -> prompts of one run there
    budget: int
    metric: str
    confidence: float
    tolerance_pct: float
    baseline: str
    configs: list[str]
    repeat: int
    output_len: int
    server_per_repeat: bool                     # a round keeps its repeats apart as the plan's
    slo: Slo | None = None                      # a goodput search's

    def check(self, where: str) -> None:
        missing = [c for c in self.grid if str(c) not in self.prompts]
        if missing:
            raise SpecError(f"field {_at(where, 'prompts')!r}: no prompts for concurrency {missing[0]}")


@dataclass(frozen=True)
class Gpu(_Json):
    """One GPU of a node of several (the inventory's; nvidia-smi's UUID and name once the runner checked)."""

    index: int
    uuid: str | None = None
    name: str | None = None
    memory_mib: int | None = None


@dataclass(frozen=True)
class RunSpec(_Json):
    """run.json: one node's queue and what its runner needs, built by the bastion
    (specfleet/campaign/spec.build_run_spec) and parsed once by the runner (`load`)."""

    schema: int
    run_id: str
    campaign: str
    plan_hash: str
    host: str
    work_dir: str
    venv: str
    env_file: str | None
    model_candidates: list[str]
    expected_vllm_version: str | None
    server_host: str
    port: int
    health_timeout_s: float
    health_poll_s: float
    prefix_cache: str
    bench_timeout_s: float
    gpu_memory_free_mib: float
    gpu_index: int | None
    stop_timeout_s: float
    items: list[Item]
    crossover: Crossover | None = None
    gpus: list[Gpu] | None = None               # a node of several GPUs: servers on disjoint GPU sets
    gpu_groups: list[list[int]] | None = None
    packing: str | None = None                  # with gpus: the plan's packing (PACKINGS)
    telemetry_period_s: float | None = None     # None: telemetry.DEFAULT_PERIOD_S; 0: off
    telemetry_power_ms: int | None = None       # None: telemetry.FAST_PERIOD_MS; 0: off
    slurm: dict | None = None                   # under Slurm: the job step's ids (slurm/node_step.py)

    @classmethod
    def from_json(cls, d, where: str = ""):
        """The schema first: a spec of another specfleet is refused by it, not by its first odd field."""
        schema = d.get("schema") if isinstance(d, dict) else None
        if isinstance(d, dict) and schema != SPEC_SCHEMA:
            raise SpecError(f"field 'schema': {_what(schema)} is not {SPEC_SCHEMA}: a run spec of another "
                            "specfleet (run `fab bench` again to place this one's)")
        return super().from_json(d, where)

    def check(self, where: str) -> None:
        names = [it.name for it in self.items]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise SpecError(f"field 'items': {dup!r} is named twice")
        if self.gpus and self.packing not in PACKINGS:
            raise SpecError(f"field 'packing': {_what(self.packing)} is not one of {', '.join(PACKINGS)} "
                            "(a spec with gpus says how they are shared)")

    @property
    def exclusive(self) -> bool:
        """One server at a time on the node (no GPUs listed, or packing exclusive)."""
        return not self.gpus or self.packing == PACKINGS[0]

    @classmethod
    def load(cls, path: str) -> "RunSpec":
        """run.json parsed once; SpecError / OSError / ValueError (not JSON) say why in one line."""
        with open(path) as f:
            return cls.from_json(json.load(f))


@dataclass
class ItemState(_Json):
    """One item's record in state.json, the runner's (changed under its lock, `Runner.set`): what
    `fab status` and `fab bench` show of it."""

    name: str
    item_hash: str | None
    status: str                                 # pending, preflight, loading, benchmarking, stopping, done, failed
    phase: str
    attempts: int
    started_at: str | None
    finished_at: str | None
    error: str | None
    server_pid: int | None
    results: list[str]
    notes: list[str]
    model_path: str | None = None
    interrupted: str | None = None              # why an earlier runner's attempt ended (a reboot)
    gpus: list[Gpu] | None = None               # a lane's GPU set
    port: int | None = None                     # a lane's server port
    prompt_fit: dict | None = None              # the prompt-fit check's answer
    requests: dict | None = None                # {"done", "of"}: the running bench run's progress
    LEAN = False

    @classmethod
    def new(cls, name: str, item_hash: str | None, phase: str = "") -> "ItemState":
        return cls(name, item_hash, "pending", phase, 0, None, None, None, None, [], [])


@dataclass
class RunState(_Json):
    """state.json: the runner's record of its queue, saved after every change (`Runner.save`); the
    bastion reads it (specfleet/facts/runner_state.py) for `fab status`, `bench`, `stop`, `collect`."""

    run_id: str
    campaign: str
    plan_hash: str
    host: str
    runner_pid: int
    started_at: str
    boot: str | None                            # host.boot_identity(): a changed one is a reboot
    rebooted: str | None                        # what to do after a reboot (runner.REBOOT_HINT)
    items: list[ItemState]
    schema: int = 1
    status: str = "running"                     # running, done, failed, stopped
    finished_at: str | None = None
    error: str | None = None
    vllm_version: str | None = None             # the engine the venv reports (preflight)
    engine: dict | None = None                  # host.engine_identity(): name, version, simulated
    model_path: str | None = None
    current: str | None = None
    running: list[str] | None = None
    updated_at: str | None = None
    gpus: list[Gpu] | None = None               # a node of several GPUs, as nvidia-smi confirmed them
    packing: str | None = None
    crossover: dict | None = None               # the search's last decision (crossover.py)
    LEAN = False
