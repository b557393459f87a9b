"""The run spec's items (the typed parts of specfleet/worker/runspec.py) of a plan's queue item,
and the command lines they render to.

The same typed parts go into the printed plan (`commands_for`, rendered with the placeholders
layout.MODEL and layout.VLLM_VERSION) and into the runner's spec (`item_spec`); the runner renders
them on the worker with the model candidate it picked and the engine version it read in preflight.
"""
from __future__ import annotations

import json
import math
import posixpath
import shlex
from dataclasses import dataclass, replace

from ..worker.layout import cell_result_filename, run_dir
from ..worker.fitcheck import PROMPT_FIELD
from ..worker.runspec import BenchRun, CellFit, Client, Fit, Item, Serve
from ..plan import Plan, engine
from ..plan.releases import refusals
from ..plan.sweep import Cell


@dataclass(frozen=True)
class Paths:
    """Where things live on the worker."""

    venv: str                       # e.g. /opt/vllm-venv; the CLI is <venv>/bin/vllm
    work_dir: str                   # results go to <work_dir>/<campaign>/<host>/
    dataset: str | None = None      # worker path of the dataset (backend/ssh.py: paths_for)
    model: str | None = None        # a resolved model path; None = layout.MODEL (runner resolves)
    vllm_version: str | None = None  # None = the plan's pin, else layout.VLLM_VERSION

    def result_dir(self, plan: Plan, node: str) -> str:
        return run_dir(self.work_dir, plan.campaign, node)

    def dataset_of(self, plan: Plan) -> str:
        """The dataset as the worker reads it: where fab placed it, else the plan's on_worker (or its path)."""
        return self.dataset or plan.benchmark.on_worker or plan.benchmark.dataset_path


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


def serve_spec(plan: Plan, item: str, paths: Paths) -> Serve:
    c, s = plan.config(item), plan.server
    # per-request acceptance (benchmark.spec_decode_metrics): only a speculative server takes the flag (vLLM
    # refuses it without --speculative-config); the worker's untimed pass runs where it is set (worker/acceptance.py)
    per_request = "summary" if c.speculative_config and plan.benchmark.spec_decode_metrics == "per_request" else None
    return Serve(vllm=posixpath.join(paths.venv, "bin", "vllm"), served_name=plan.model.served_name,
                 server_args=list(s.args), prefix_caching=s.prefix_cache != "disabled",
                 speculative_config=c.speculative_config, extra_args=list(c.extra_args),
                 per_request_spec_decode_metrics=per_request, **engine(plan, item))


def serve_argv(plan: Plan, item: str, paths: Paths) -> list[str]:
    """The `vllm serve` argv of a configuration on the plan's port (the model: paths.model or the placeholder)."""
    return serve_spec(plan, item, paths).argv(model=paths.model, host=plan.server.host, port=plan.server.port)


def num_prompts(plan: Plan, concurrency: int) -> int:
    """Prompts of one run: the plan's; a crossover search with steady_state: required raises them to a
    steady state per run (min_prompts_per_concurrency x concurrency)."""
    b = plan.benchmark
    scale = b.concurrency_search is not None and b.steady_state == "required"
    return max(b.num_prompts, math.ceil(b.min_prompts_per_concurrency * concurrency)) if scale else b.num_prompts


def client_spec(plan: Plan, node: str, item: str, paths: Paths, isolation: str | None = None) -> Client:
    """What every bench run of `item` on `node` shares, with the --metadata that says how a run was set
    up (the report reads it from each result). The runner adds what only the worker knows:
    generation_config (the model's sampling defaults, which apply to every parameter the client does
    not send), decoding, prompts_dropped, the GPUs."""
    b, s = plan.benchmark, plan.server
    sent = {} if b.temperature is None else {"temperature": b.temperature}
    version = paths.vllm_version or plan.vllm_version  # None: the runner's preflight fills it in
    metadata = [["node", node], ["config", item], ["plan_hash", plan.plan_hash()], ["vllm_version", version],
                ["campaign", plan.campaign],
                ["sampling_params", json.dumps(sent, sort_keys=True, separators=(",", ":"))],
                ["num_warmups", str(b.num_warmups)], ["prefix_cache", s.prefix_cache], ["repeats", str(b.repeat)],
                ["steady_state", b.steady_state], ["max_failed_requests", str(b.max_failed_requests)]]
    # repeat_isolation (how a repeat is kept apart from the others: server-start or cache-reset) is
    # written wherever there is more than one run: the plan's benchmark.repeat_isolation, or
    # `isolation` for a run added outside the plan's repeats (a gate run: its own server start)
    isolation = isolation or (b.repeat_isolation if b.repeat > 1 else None)
    if isolation:
        metadata.append(["repeat_isolation", isolation])
    return Client(vllm=posixpath.join(paths.venv, "bin", "vllm"), backend=b.backend, endpoint=b.endpoint,
                  served_name=plan.model.served_name, dataset_name=b.dataset_name,
                  dataset_path=paths.dataset_of(plan),
                  result_dir=paths.result_dir(plan, node), temperature=b.temperature,
                  percentile_metrics=list(b.percentile_metrics), metric_percentiles=list(b.metric_percentiles),
                  num_warmups=b.num_warmups, save_detailed=b.save_detailed, repeats=b.repeat,
                  burstiness=b.burstiness, seed=b.seed,
                  goodput_ms={k.removesuffix("_ms"): v for k, v in (b.slo.limits() if b.slo else {}).items()},
                  metadata=metadata)


def bench_run(plan: Plan, item: str, cell: int | Cell, rep: int = 1) -> BenchRun:
    """One bench run of `item`: a cell (or the plan's first cell at a concurrency) at repeat `rep`."""
    cell = find_cell(plan, cell)
    plain = cell.name == f"conc{cell.concurrency}"  # a plain plan's items (and item_hash) stay as they were
    return BenchRun(concurrency=cell.concurrency, rep=rep, num_prompts=cell_prompts(plan, cell),
                    output_len=cell.output_len, category=cell.category, request_rate=cell.request_rate,
                    result_file=cell_result_filename(item, cell, rep, plan.benchmark.repeat),
                    cell=None if plain else cell.name, fit=None if plain else cell_fit(plan, cell))


def bench_argv(plan: Plan, node: str, item: str, cell: int | Cell, paths: Paths,
               rep: int = 1, isolation: str | None = None) -> list[str]:
    """The `vllm bench serve` argv of one bench run as the printed plan shows it."""
    return bench_run(plan, item, cell, rep).argv(
        client_spec(plan, node, item, paths, isolation), model=paths.model, vllm_version=None,
        host=plan.server.host, port=plan.server.port)


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


def queue_items(plan: Plan, node: str, queue: list[str], paths: Paths, gate_runs: int = 0) -> list[Item]:
    """The run spec's items for `queue` (configuration names, baseline first), in the order they run.

    repeat_isolation server-start: one item per (repeat, configuration), repeats outermost, so the
    baseline and the configurations sharing the GPU interleave (vanilla r1, cfg r1, vanilla r2, ...);
    cache-reset: one item per configuration holding every repeat. `gate_runs` > benchmark.repeat
    (fab bench --gate-runs): the baseline's gate cells again, one server start per run, up to that
    many runs, appended; the items already measured keep their hashes (none holds the count).
    """
    b = plan.benchmark
    if server_per_repeat(plan):
        items = [item_spec(plan, node, name, paths, rep=rep) for rep in range(1, b.repeat + 1) for name in queue]
    else:
        items = [item_spec(plan, node, name, paths) for name in queue]
    if plan.baseline in queue:
        items += [item_spec(plan, node, plan.baseline, paths, rep=rep, cells=gate_cells(plan))
                  for rep in range(b.repeat + 1, gate_runs + 1)]
    return items


def cell_fit(plan: Plan, cell: Cell) -> CellFit:
    """What the runner's prompt-fit check needs of one cell where it differs from the item's `fit`."""
    b = plan.benchmark
    own = (("num_prompts", cell.num_prompts, b.num_prompts), ("output_len", cell.output_len, b.output_len),
           ("category", cell.category, None))
    return CellFit(**{key: value for key, value, items in own if value != items})


def item_spec(plan: Plan, node: str, item: str, paths: Paths, rep: int | None = None,
              cells: list[Cell] | None = None) -> Item:
    """One queue item as the runner spec holds it (docs/campaign.md; runspec.py for its typed parts):
    every repeat of configuration `item` on one server start, or with `rep` that repeat alone (of
    `cells`, default all), named repeat_item_name. A repeat past benchmark.repeat is a gate run
    (server-start)."""
    b = plan.benchmark
    isolation = "server-start" if rep is not None and rep > b.repeat else None
    # what the runner's prompt-fit check needs (fitcheck.py, run with the venv's python)
    fit = Fit(dataset=paths.dataset_of(plan), num_prompts=max(num_prompts(plan, c) for c in b.concurrencies),
              output_len=b.output_len, max_model_len=engine(plan, item)["max_model_len"],
              chat_template=b.chat_template, policy=b.prompts_that_do_not_fit,
              prompt_field=PROMPT_FIELD.get(b.dataset_name))  # only then: a Spec-Bench item keeps its hash
    name = item if rep is None else repeat_item_name(item, rep)
    out = Item(name=name, serve=serve_spec(plan, item, paths),
               client=client_spec(plan, node, item, paths, isolation),
               bench=[bench_run(plan, item, cell, k) for cell, k in run_order(plan, None if rep is None else [rep], cells)],
               required_paths=required_paths(plan, item, paths), fit=fit,
               max_failed_requests=b.max_failed_requests, temperature=b.temperature,
               # its server log is the configuration's (a header per start), as a crossover round's
               **({"config": item, "log_name": item} if name != item else {})).hashed()
    # after the hash: the releases of the matrix that refuse this item (the worker refuses it under the
    # version its venv reports, before the server starts); the same measurement whatever the matrix says
    return replace(out, release_refusals=refusals(plan, item) or None)


def required_paths(plan: Plan, item: str, paths: Paths) -> list[str]:
    """Files the worker must be able to read before the model load starts."""
    req = [paths.dataset_of(plan)]
    sc = plan.config(item).speculative_config or {}
    if isinstance(sc.get("model"), str) and sc["model"].startswith("/"):
        req.append(posixpath.join(sc["model"], "config.json"))
    return req


def commands_for(plan: Plan, node: str, item: str, paths: Paths) -> list[str]:
    """Shell-quoted command lines: per server start, `vllm serve ...` then one `vllm bench serve ...`
    per run (a server start per repeat with repeat_isolation server-start)."""
    lines = []
    for reps in ([[r] for r in range(1, plan.benchmark.repeat + 1)] if server_per_repeat(plan) else [None]):
        lines.append(shlex.join(serve_argv(plan, item, paths)))
        for cell, rep in run_order(plan, reps):
            lines.append(shlex.join(bench_argv(plan, node, item, cell, paths, rep)))
    return lines
