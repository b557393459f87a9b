#!/usr/bin/env python3
"""Scale on paper: a campaign split over 256 Slurm nodes x 8 GPUs and its submission rendered, no cluster.

What runs is what `fab bench` runs under `scheduler: {kind: slurm}` once Slurm has answered (sinfo):
the split over 256 nodes of 8 GPUs each (specfleet.campaign.schedule.split), then `place` (specfleet.slurm.dispatch):
one run spec and provenance probe per node written (in one specs.json) on the (here: temporary) shared
path, the runner files, the dataset, the sbatch script and its argv (sbatch_argv, --test-only and the real one). The plan
is the field report's (plans/qwen3-32b.yml) with 2 x 256 extra configurations drawn around its four
(as benchmarks/campaign_makespan.py does), so every node gets a queue, once as shipped (`packing:
exclusive`, one server per node: the one-GPU split) and once with `packing: shared` (a server per GPU:
the split over GPU slots). Target: < 2 s wall for the split and the submission together.

    .venv/bin/python benchmarks/slurm_scale.py [--nodes 256] [--gpus 8] [--runs 3]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specfleet.plan import parse_plan  # noqa: E402
from specfleet.campaign.schedule.split import NodeInfo, split  # noqa: E402
from specfleet.inventory import Host  # noqa: E402
from specfleet.scheduler import SlurmScheduler  # noqa: E402
from specfleet.slurm.dispatch import place  # noqa: E402
from specfleet.slurm.script import sbatch_argv  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from campaign_makespan import campaign  # noqa: E402


def one(n_nodes: int, gpus: int, seed: int, packing: str) -> dict:
    rng = random.Random(seed)
    drawn, _nodes, _durations = campaign(rng, n_nodes, ["nfs"])
    doc = drawn.model_dump(mode="json")
    doc["configurations"] = doc["configurations"][:4 + 2 * n_nodes]
    doc["benchmark"]["dataset_path"] = str(REPO / "datasets" / "sample" / "question.jsonl")
    doc["packing"] = packing
    plan = parse_plan(doc, REPO / "plans" / "qwen3-32b.yml")
    nodes = [NodeInfo(f"n{i:03d}", gpus=tuple({"index": g} for g in range(gpus)), gpus_source="slurm")
             for i in range(n_nodes)]
    hosts = [Host(n.name, n.name, "root", 22, None, "/dev/null", False, 5, 600, ("workers",),
                  {"venv_path": "/shared/venv"}) for n in nodes]
    with tempfile.TemporaryDirectory() as shared:
        cfg = SlurmScheduler(kind="slurm", partition="gpu", time_limit="04:00:00", shared_dir=shared)
        t0, c0 = time.perf_counter(), time.process_time()
        queues = split(plan, nodes)
        t1, c1 = time.perf_counter(), time.process_time()
        job, specs = place(cfg, plan, hosts, queues, nodes)
        argv = [sbatch_argv(cfg, job, test_only=True), sbatch_argv(cfg, job)]
        t2, c2 = time.perf_counter(), time.process_time()
        written = sum(1 for _ in Path(shared).rglob("*") if _.is_file())
    return {"split_s": t1 - t0, "render_s": t2 - t1, "total_s": t2 - t0, "split_cpu_s": c1 - c0, "total_cpu_s": c2 - c0, "items": len(plan.configurations),
            "specs": len(specs), "files": written, "argv_words": len(argv[1]), "method": queues.method,
            "ratio": queues.ratio}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    worst = 0.0
    for packing in ("exclusive", "shared"):
        runs = [one(a.nodes, a.gpus, seed, packing) for seed in range(1, a.runs + 1)]
        tot = [r["total_s"] for r in runs]
        worst = max(worst, *tot)
        r0 = runs[0]
        print(f"packing: {packing}: {a.nodes} nodes x {a.gpus} GPUs, {r0['items']} configurations, {r0['specs']} run "
              f"specs, {r0['files']} files written, {a.runs} runs (seeds 1..{a.runs})")
        print(f"  split   median {statistics.median(r['split_s'] for r in runs):.3f} s "
              f"[{min(r['split_s'] for r in runs):.3f}-{max(r['split_s'] for r in runs):.3f}] "
              f"(method {', '.join(sorted({r['method'] for r in runs}))}; "
              f"makespan / lower bound at most {max(r['ratio'] for r in runs):.3f})")
        print(f"  render  median {statistics.median(r['render_s'] for r in runs):.3f} s ({r0['specs']} run specs, "
              "runner files, dataset, probes, script, both sbatch argv)")
        print(f"  total   median {statistics.median(tot):.3f} s [{min(tot):.3f}-{max(tot):.3f}]; CPU time of this "
              f"process: split median {statistics.median(r['split_cpu_s'] for r in runs):.3f} s, total "
              f"{statistics.median(r['total_cpu_s'] for r in runs):.3f} s (wall minus waiting for a core: "
              "read it when the machine is shared)")
    print(f"split and submission, {a.nodes} nodes x {a.gpus} GPUs, slowest run: {worst:.3f} s; target < 2 s: "
          f"{'met' if worst < 2 else 'NOT met'}")
    return 0 if worst < 2 else 1


if __name__ == "__main__":
    sys.exit(main())
