"""Build the JSON run spec that the worker program executes on one worker (schema: docs/campaign.md),
and the worker program itself as the one file the configs role places (worker_zipapp)."""
from __future__ import annotations

import io
import json
import time
import zipfile
from dataclasses import replace
from pathlib import Path

from .commands import Paths, num_prompts, queue_items, server_per_repeat
from ..plan import Plan
from .schedule.slotsplit import pins_of
from ..worker.runspec import SPEC_SCHEMA, Crossover, Gpu, RunSpec, Slo
from ..worker.stats import SPEEDUP_CONFIDENCE  # the report's interval, the one default

WORKER = Path(__file__).resolve().parent.parent / "worker"  # the package specfleet.worker
# inside the zipapp the package has a name of its own: it imports itself relatively, never specfleet
ZIPAPP_PACKAGE = "specfleet_worker"
_ZIPAPP_MAIN = f"import sys\nfrom {ZIPAPP_PACKAGE}.__main__ import main\nsys.exit(main())\n"


def worker_zipapp() -> bytes:
    """specfleet.worker as one zipapp (runner.pyz; `python3 -S runner.pyz --spec run.json`, on one
    GPU or eight): the same bytes for the same sources (sorted names, fixed times)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in [("__main__.py", _ZIPAPP_MAIN.encode()),
                           *((f"{ZIPAPP_PACKAGE}/{f.name}", f.read_bytes()) for f in sorted(WORKER.glob("*.py")))]:
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data, compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def build_run_spec(plan: Plan, node: str, queue: list[str], paths: Paths, *,
                   env_file: str | None = None, run_id: str | None = None,
                   gpu_index: int | None = None, gpus: list[dict] | None = None,
                   gpu_groups: list[list[int]] | None = None, gate_runs: int = 0) -> RunSpec:
    """The run spec for `node` running `queue` (config names in order, baseline first).

    `gpus` (the node's GPUs, gpusets.parse_gpus) with more than one: the runner's slot pool runs the
    queue (spec fields gpus, gpu_groups, packing; items[].whole_node, gpu_pin); else the one-GPU
    runner, as ever. `gate_runs`: fab bench --gate-runs (commands.queue_items).
    """
    ph = plan.plan_hash()
    items = queue_items(plan, node, queue, paths, gate_runs)
    several = bool(gpus and len(gpus) > 1)
    if several:
        pinned = pins_of(plan, [g["index"] for g in gpus])   # equivalence.every_gpu: the baseline per GPU
        items = [replace(it, whole_node=plan.config(it.configuration).whole_node or None,
                         gpu_pin=pinned.get(it.configuration)) for it in items]
    return RunSpec(
        schema=SPEC_SCHEMA,
        run_id=run_id or f"{plan.campaign}-{ph}-{node}-{time.strftime('%Y%m%dT%H%M%S')}",
        campaign=plan.campaign, plan_hash=ph, host=node, work_dir=paths.work_dir, venv=paths.venv,
        env_file=env_file, model_candidates=list(plan.model.candidates),
        expected_vllm_version=plan.vllm_version, server_host=plan.server.host, port=plan.server.port,
        health_timeout_s=plan.server.health_timeout_s, health_poll_s=plan.server.health_poll_s,
        prefix_cache=plan.server.prefix_cache, bench_timeout_s=plan.benchmark.timeout_s,
        gpu_memory_free_mib=plan.gpu_memory_free_mib, gpu_index=gpu_index, stop_timeout_s=plan.stop_timeout_s,
        items=items, crossover=crossover_spec(plan, queue),
        **({"gpus": [Gpu(**g) for g in gpus], "gpu_groups": gpu_groups, "packing": plan.packing} if several else {}))


def crossover_spec(plan: Plan, queue: list[str]) -> Crossover | None:
    """What the runner's crossover rounds need (specfleet/worker/crossover.py), or None: the grids
    and each point's prompts are decided here, from the plan."""
    b, x = plan.benchmark, plan.benchmark.concurrency_search
    if x is None:
        return None
    grid = x.fine()
    return Crossover(grid=grid, coarse=x.coarse(), prompts={str(c): num_prompts(plan, c) for c in grid},
                     budget=x.budget, metric=x.metric, confidence=SPEEDUP_CONFIDENCE,
                     tolerance_pct=plan.equivalence.tolerance_pct, baseline=plan.baseline,
                     configs=[n for n in queue if n != plan.baseline], repeat=b.repeat, output_len=b.output_len,
                     server_per_repeat=server_per_repeat(plan),
                     slo=Slo(b.slo.limits(), b.slo.attainment_pct) if x.metric == "goodput" else None)


def dump_run_spec(spec: RunSpec) -> str:
    """run.json's text: the one serialisation of a run spec (the Slurm submission writes its JSON compactly)."""
    return json.dumps(spec.to_json(), indent=2, sort_keys=True) + "\n"


class RunnerBusy(Exception):
    """The worker's runner runs another plan or queue: this one is not placed over it."""


def resumed(spec: RunSpec, placed: dict | None, running_pid: int | None) -> RunSpec:
    """`spec` as it goes to a worker whose run spec is `placed` and whose runner (if alive) is `running_pid`.

    The same plan hash and queue is the same campaign: it resumes under its run_id (the runner keeps
    the done items, collect their results). Anything else replaces the placed spec, unless a runner
    still runs it: RunnerBusy (stop it first)."""
    # `placed` is what the worker holds, perhaps of an older specfleet: read for these three keys only
    items = placed.get("items") if isinstance(placed, dict) else None
    if placed and placed.get("plan_hash") == spec.plan_hash and isinstance(placed.get("run_id"), str) and \
            isinstance(items, list) and [i.get("name") if isinstance(i, dict) else None for i in items] == \
            [i.name for i in spec.items]:
        return replace(spec, run_id=placed["run_id"])
    if running_pid is not None:
        raise RunnerBusy(f"a runner for another plan or queue is running (pid {running_pid}); `fab stop` it first")
    return spec
