"""The typed parts of the run spec: what one `vllm serve` and one `vllm bench serve` run are, and
the one place their argv is rendered. Stdlib only; part of the worker program.

The bastion builds them (specfleet/campaign/commands.py) into run.json (items[].serve, .client,
.bench[]); the runner renders the argv with what only the worker knows (the model folder, the engine
version, its server's port, the prompts the fit check kept, the GPUs); the printed plan renders
the same argv with the placeholders layout.MODEL and layout.VLLM_VERSION. Nothing edits an argv
after it is rendered.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace

from .layout import MODEL, VLLM_VERSION


def _num(x: float) -> str:
    """A number as the plan wrote it: 16, not 16.0."""
    return str(int(x)) if float(x).is_integer() else str(x)


_LEAVES = (str, int, float, bool, type(None))
CUSTOM = "custom"   # --dataset-name custom: the user's JSONL of {"prompt": ...}, its own output-len flag
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
        return asdict(v)  # type: ignore[call-overload]
    return v


_KINDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _field_kinds(cls: type) -> tuple[tuple[str, bool], ...]:
    """(field name, whether it is optional: default None), once per class."""
    if cls not in _KINDS:
        _KINDS[cls] = tuple((f.name, f.default is None) for f in fields(cls))  # type: ignore[arg-type]
    return _KINDS[cls]


class _Json:
    """JSON on the wire: a dataclass from its dict (unknown keys refused, by name)."""

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
    def from_json(cls, d: dict):
        if not isinstance(d, dict):
            raise ValueError(f"{cls.__name__}: expected an object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown key(s) {', '.join(unknown)}")
        return cls(**d)


@dataclass(frozen=True)
class Serve(_Json):
    """One configuration's server: `<vllm> serve <model> --served-model-name ... --host --port ...`."""

    vllm: str                                   # <venv>/bin/vllm
    served_name: str
    server_args: list[str]                      # the plan's server.args
    prefix_caching: bool = True                 # False: --no-enable-prefix-caching
    speculative_config: dict | None = None
    extra_args: list[str] = field(default_factory=list)  # the configuration's extra_args, last

    def options(self) -> list[str]:
        """The words after `--port N`: what the plan asks of the server (read by the GPU count and
        the sampling-defaults lookup)."""
        spec = [] if self.speculative_config is None else \
            ["--speculative-config", json.dumps(self.speculative_config, separators=(",", ":"))]
        return [*self.server_args, *([] if self.prefix_caching else ["--no-enable-prefix-caching"]),
                *spec, *self.extra_args]

    def argv(self, *, model: str | None, host: str, port: int) -> list[str]:
        return [self.vllm, "serve", model or MODEL, "--served-model-name", self.served_name,
                "--host", host, "--port", str(port), *self.options()]


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
    metadata: list[list[str]] = field(default_factory=list)

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
    fit: dict | None = None                     # where this cell's prompts differ from the item's fit
    dropped: Dropped | None = None

    @classmethod
    def from_json(cls, d: dict) -> "BenchRun":
        run = super().from_json(d)
        return replace(run, dropped=Dropped.from_json(run.dropped)) if isinstance(run.dropped, dict) else run

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


def item_parts(item: dict) -> tuple[Serve, Client, list[BenchRun]]:
    """An item of run.json as its typed parts (ValueError names what is wrong)."""
    return (Serve.from_json(item["serve"]), Client.from_json(item["client"]),
            [BenchRun.from_json(b) for b in item["bench"]])
