"""The exact `vllm serve` / `vllm bench serve` command lines of one queue item.

The same argv lists go into the printed plan (`commands_for`, shlex-quoted) and into the
runner's spec (`item_argv`). Two placeholders are filled in on the worker by the runner
(layout.MODEL, layout.VLLM_VERSION): the first model candidate that holds a config.json
(run-bench.sh's pick()) and the engine version the runner read in preflight
(runner_lib.engine_version).
"""
from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from dataclasses import dataclass

from ..worker.crossover import CONC, PER_CONC, PROMPTS, REP, prompts_at
from ..worker.layout import MODEL, VLLM_VERSION, cell_result_filename, result_filename, run_dir
from ..plan import Plan
from ..plan.sweep import Cell
from ..plan.slo import goodput_args
from ..plan.arrivals import arrival_args


@dataclass(frozen=True)
class Paths:
    """Where things live on the worker."""

    venv: str                       # e.g. /opt/vllm-venv; the CLI is <venv>/bin/vllm
    work_dir: str                   # results go to <work_dir>/<campaign>/<host>/
    dataset: str | None = None      # worker path of the dataset (tasks/bench.py: paths_for)
    model: str | None = None        # a resolved model path; None = layout.MODEL (runner resolves)
    vllm_version: str | None = None  # None = the plan's pin, else layout.VLLM_VERSION

    def result_dir(self, plan: Plan, node: str) -> str:
        return run_dir(self.work_dir, plan.campaign, node)


def cell_prompts(plan: Plan, cell: Cell) -> int:
    """Prompts of one run of a cell: the cell's; a crossover search scales them per concurrency."""
    if plan.benchmark.concurrency_search is not None:
        return num_prompts(plan, cell.concurrency)
    return cell.num_prompts


def find_cell(plan: Plan, cell: int | Cell) -> Cell:
    """The cell itself, or the plan's first cell at that concurrency (a plain one when it has none:
    a crossover round's concurrency)."""
    if isinstance(cell, Cell):
        return cell
    for c in plan.benchmark.cells:
        if c.concurrency == cell:
            return c
    b = plan.benchmark
    return Cell(cell, b.output_len, b.num_prompts, None, f"conc{cell}")


def serve_argv(plan: Plan, item: str, paths: Paths) -> list[str]:
    c = plan.config(item)
    s = plan.server
    argv = [posixpath.join(paths.venv, "bin", "vllm"), "serve", paths.model or MODEL,
            "--served-model-name", plan.model.served_name,
            "--host", s.host, "--port", str(s.port), *s.args]
    if s.prefix_cache == "disabled":
        argv.append("--no-enable-prefix-caching")
    if c.speculative_config is not None:
        argv += ["--speculative-config", json.dumps(c.speculative_config, separators=(",", ":"))]
    return argv + list(c.extra_args)


def num_prompts(plan: Plan, concurrency: int) -> int:
    """Prompts of one run: the plan's; a crossover search raises them to a steady state per run."""
    b = plan.benchmark
    scale = b.concurrency_search is not None and b.steady_state == "required"
    return prompts_at(b.num_prompts, b.min_prompts_per_concurrency, concurrency, scale)


def bench_argv(plan: Plan, node: str, item: str, cell: int | Cell, paths: Paths,
               rep: int = 1, isolation: str | None = None) -> list[str]:
    """The one `vllm bench serve` argv of a bench cell (the only place it is built: a runner-side
    template for new cells is made from it). `isolation`: how this run is kept apart from the
    other repeats when it is not the plan's (run_setup)."""
    cell = find_cell(plan, cell)
    concurrency = cell.concurrency
    b = plan.benchmark
    s = plan.server
    model = paths.model or MODEL
    version = paths.vllm_version or plan.vllm_version or VLLM_VERSION
    metadata = [f"node={node}", f"config={item}", f"plan_hash={plan.plan_hash()}",
                f"vllm_version={version}", f"campaign={plan.campaign}"]
    if b.repeat > 1 or rep > 1:
        metadata.append(f"repeat={rep}")
    metadata += run_setup(plan, cell, isolation)
    fmt = lambda x: str(int(x)) if float(x).is_integer() else str(x)  # noqa: E731
    return [
        posixpath.join(paths.venv, "bin", "vllm"), "bench", "serve",
        "--backend", b.backend,
        "--base-url", f"http://{s.host}:{s.port}",
        "--endpoint", b.endpoint,
        "--model", plan.model.served_name,
        "--tokenizer", model,          # the served name is not a HF repo id (report §3.3)
        "--dataset-name", b.dataset_name,
        "--dataset-path", paths.dataset or b.on_worker or b.dataset_path,
        "--num-prompts", str(cell_prompts(plan, cell)),
        "--no-oversample",
        "--spec-bench-output-len", str(cell.output_len),
        # the loader filters by category before its seed-0 shuffle: the first num_prompts of that category
        *(["--spec-bench-category", cell.category] if cell.category else []),
        "--max-concurrency", str(concurrency),
        *arrival_args(cell, b.burstiness, b.seed),   # an open-loop cell (arrivals.py)
        *(["--temperature", fmt(b.temperature)] if b.temperature is not None else []),
        "--percentile-metrics", ",".join(b.percentile_metrics),
        "--metric-percentiles", ",".join(fmt(p) for p in b.metric_percentiles),
        "--num-warmups", str(b.num_warmups),
        *(["--save-detailed"] if b.save_detailed else []),
        *goodput_args(b.slo),
        "--save-result",
        "--result-dir", paths.result_dir(plan, node),
        "--result-filename", cell_result_filename(item, cell, rep, b.repeat),
        "--metadata", *metadata,
    ]


def run_setup(plan: Plan, cell: int | Cell, isolation: str | None = None) -> list[str]:
    """`--metadata` words that say how a run was set up (the report reads them from each result).

    repeat_isolation (how a repeat is kept apart from the others: server-start or cache-reset) is
    written wherever there is more than one run: the plan's benchmark.repeat_isolation, or
    `isolation` for a run added outside the plan's repeats (a gate run: its own server start).

    The runner adds what only the worker knows: generation_config (the model's sampling defaults,
    which apply to every parameter the client does not send), decoding, prompts_dropped.
    """
    b, s = plan.benchmark, plan.server
    cell = find_cell(plan, cell)
    sent = {} if b.temperature is None else {"temperature": b.temperature}
    isolation = isolation or (b.repeat_isolation if b.repeat > 1 else None)
    return [f"sampling_params={json.dumps(sent, sort_keys=True, separators=(',', ':'))}",
            f"num_warmups={b.num_warmups}", f"prefix_cache={s.prefix_cache}", f"repeats={b.repeat}",
            f"steady_state={b.steady_state}", f"prompts_per_concurrency={cell_prompts(plan, cell) / cell.concurrency:g}",
            f"max_failed_requests={b.max_failed_requests}",
            *([f"category={cell.category}"] if cell.category else []),
            *([f"repeat_isolation={isolation}"] if isolation else []),
            *([f"arrival_seed={b.seed}"] if cell.request_rate is not None else [])]


def run_order(plan: Plan, reps: list[int] | None = None, cells: list[Cell] | None = None) -> list[tuple[Cell, int]]:
    """(cell, rep) in the order they run on one server: repeats interleaved across cells."""
    b = plan.benchmark
    return [(cell, rep) for rep in reps or range(1, b.repeat + 1) for cell in cells or b.cells]


def server_per_repeat(plan: Plan) -> bool:
    """Each repeat on its own server start (benchmark.repeat_isolation: server-start, more than one run)."""
    b = plan.benchmark
    return b.repeat > 1 and b.repeat_isolation == "server-start"


def repeat_item_name(config: str, rep: int) -> str:
    """The queue item of one repeat of `config` on its own server start: the configuration's name for
    the first (its done marker and server log as ever), `<config>.r<K>` for the others."""
    return config if rep == 1 else f"{config}.r{rep}"


def gate_cells(plan: Plan) -> list[Cell]:
    """The bench cells the node-equivalence gate reads: the baseline's at equivalence.concurrency."""
    return [c for c in plan.benchmark.cells if c.concurrency == plan.equivalence.concurrency]


def queue_items(plan: Plan, node: str, queue: list[str], paths: Paths, gate_runs: int = 0) -> list[dict]:
    """The run spec's items for `queue` (configuration names, baseline first), in the order they run.

    repeat_isolation server-start: one item per (repeat, configuration), repeats outermost, so the
    baseline and the configurations sharing the GPU interleave (vanilla r1, cfg r1, vanilla r2, ...);
    cache-reset: one item per configuration holding every repeat. `gate_runs` > benchmark.repeat
    (fab bench --gate-runs): the baseline's gate cells again, one server start per run, up to that
    many runs, appended; the items already measured keep their hashes (none holds the count).
    """
    b = plan.benchmark
    if server_per_repeat(plan):
        items = [item_argv(plan, node, name, paths, rep=rep) for rep in range(1, b.repeat + 1) for name in queue]
    else:
        items = [item_argv(plan, node, name, paths) for name in queue]
    if plan.baseline in queue:
        items += [item_argv(plan, node, plan.baseline, paths, rep=rep, cells=gate_cells(plan))
                  for rep in range(b.repeat + 1, gate_runs + 1)]
    return items


def cell_fit(plan: Plan, cell: Cell) -> dict:
    """What the runner's prompt-fit check needs of one cell where it differs from the item's `fit`."""
    b = plan.benchmark
    out = {}
    if cell.num_prompts != b.num_prompts:
        out["num_prompts"] = cell.num_prompts
    if cell.output_len != b.output_len:
        out["output_len"] = cell.output_len
    if cell.category:
        out["category"] = cell.category
    return out


def max_model_len(plan: Plan, item: str) -> str | None:
    """The --max-model-len the server gets (the last one wins, as in argparse); None = model's."""
    words, val = [*plan.server.args, *plan.config(item).extra_args], None
    for i, w in enumerate(words):
        if w == "--max-model-len" and i + 1 < len(words):
            val = words[i + 1]
        elif w.startswith("--max-model-len="):
            val = w.split("=", 1)[1]
    return val


def item_argv(plan: Plan, node: str, item: str, paths: Paths, rep: int | None = None,
              cells: list[Cell] | None = None) -> dict:
    """One queue item as the runner spec holds it (see runner.py for the schema): every repeat of
    configuration `item` on one server start, or with `rep` that repeat alone (of `cells`, default
    all), named repeat_item_name. A repeat past benchmark.repeat is a gate run (server-start)."""
    b = plan.benchmark
    isolation = "server-start" if rep is not None and rep > b.repeat else None
    benches = []
    for cell, k in run_order(plan, None if rep is None else [rep], cells):
        benches.append({
            "concurrency": cell.concurrency,
            "rep": k,
            "argv": bench_argv(plan, node, item, cell, paths, k, isolation),
            "result_file": cell_result_filename(item, cell, k, b.repeat),
            "num_prompts": cell_prompts(plan, cell),
        })
        if cell.name != f"conc{cell.concurrency}":  # a plain plan's items (and item_hash) stay as they were
            benches[-1].update(cell=cell.name, fit=cell_fit(plan, cell))
    # what the runner's prompt-fit check needs (fitcheck.py, run with the venv's python)
    fit = {"dataset": paths.dataset or b.on_worker or b.dataset_path,
           "num_prompts": max(num_prompts(plan, c) for c in b.concurrencies),
           "output_len": b.output_len,
           "max_model_len": max_model_len(plan, item), "chat_template": b.chat_template,
           "policy": b.prompts_that_do_not_fit}
    out = {"name": item if rep is None else repeat_item_name(item, rep),
           "serve_argv": serve_argv(plan, item, paths), "bench": benches,
           "required_paths": required_paths(plan, item, paths), "fit": fit,
           "max_failed_requests": b.max_failed_requests, "temperature": b.temperature}
    if out["name"] != item:   # its server log is the configuration's (a header per start), as a crossover round's
        out.update(config=item, log_name=item)
    out["item_hash"] = hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()[:12]
    return out


def required_paths(plan: Plan, item: str, paths: Paths) -> list[str]:
    """Files the worker must be able to read before the model load starts."""
    req = [paths.dataset or plan.benchmark.on_worker or plan.benchmark.dataset_path]
    sc = plan.config(item).speculative_config or {}
    if isinstance(sc.get("model"), str) and sc["model"].startswith("/"):
        req.append(posixpath.join(sc["model"], "config.json"))
    return req


def bench_templates(plan: Plan, node: str, item: str, paths: Paths) -> list[dict]:
    """Per repeat, the bench run of `item` at any concurrency: bench_argv with the placeholders
    @CONC@, @REP@, @NUM_PROMPTS@, @PROMPTS_PER_CONC@ that the runner's crossover rounds fill in."""
    b, out = plan.benchmark, []
    for rep in range(1, b.repeat + 1):
        # a round runs every repeat on one server start, whatever the plan's repeat_isolation
        argv = bench_argv(plan, node, item, 1, paths, rep, "cache-reset" if b.repeat > 1 else None)
        for flag, word in (("--max-concurrency", CONC), ("--num-prompts", PROMPTS),
                           ("--result-filename", result_filename(item, CONC, REP, b.repeat))):  # type: ignore[arg-type]
            argv[argv.index(flag) + 1] = word
        argv = [f"prompts_per_concurrency={PER_CONC}" if w.startswith("prompts_per_concurrency=") else w
                for w in argv]
        out.append({"rep": rep, "argv": argv, "result_file": result_filename(item, CONC, REP, b.repeat)})  # type: ignore[arg-type]
    return out


def commands_for(plan: Plan, node: str, item: str, paths: Paths) -> list[str]:
    """Shell-quoted command lines: per server start, `vllm serve ...` then one `vllm bench serve ...`
    per run (a server start per repeat with repeat_isolation server-start)."""
    lines = []
    for reps in ([[r] for r in range(1, plan.benchmark.repeat + 1)] if server_per_repeat(plan) else [None]):
        lines.append(shlex.join(serve_argv(plan, item, paths)))
        for cell, rep in run_order(plan, reps):
            lines.append(shlex.join(bench_argv(plan, node, item, cell, paths, rep)))
    return lines
