#!/usr/bin/env python3
"""Runner specs for the device runs, and their provenance stamp on the device.

    python3 -m testbed.realgpu.specs make PLANS_DIR OUT_DIR     # here: specfleet's own planner
    python3 specs.py stamp SPEC OUT [PYTHON]                     # device: stdlib only
    python3 specs.py gpu-env BASE_ENV INDEX OUT                  # device: one GPU's env file

`make`: one spec per plans/*.yml, node "h200", queue = baseline first then the plan's order; the
worker paths are the device layout device.sh builds (DEVICE_PATHS). The runner
(specfleet/worker/runner.py) executes it there unchanged. A plan named in TWO_GPU (issue 17: the field
report's design, two GPUs of one host as two workers) gets one spec per GPU instead, named
CAMPAIGN.NODE.json: specfleet's split assigns the configurations (the baseline on both), and each
spec is moved onto its GPU (for_gpu: the nvidia-smi gate's index, its own port, an env file whose
CUDA_VISIBLE_DEVICES shows the server that one GPU). device.sh `pair` runs the two runners at once.

`stamp`: the runner records no GPU facts, and the device is the only place that knows them, so
before the runner starts, device.sh adds `gpu=`, `driver=`, `torch_version=`, `cuda_version=` and
`engine=` to every `vllm bench serve --metadata` list of the spec. vLLM writes them into each result
file, and specfleet's report reads them into its provenance table (specfleet/resultfile/schema.py
PROVENANCE_KEYS). Values are read on the device (nvidia-smi, torch), never typed in.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

NODE = "h200"
WORK_DIR = "/tmp/sfwork"
VENV = "/tmp/vllm-venv"          # <venv>/bin/vllm is device.sh's wrapper around the image's python
DATA_DIR = "/tmp/sfgpu"
DATASET = f"{DATA_DIR}/question.jsonl"
ENV_FILE = f"{DATA_DIR}/vllm.env"
#: Stamped keys, in this order. `engine` says what produced the numbers (the report's provenance).
STAMP_KEYS = ("gpu", "driver", "torch_version", "cuda_version", "engine")
ENGINE = "vllm-cuda (real GPU)"
#: Plans run as two workers of one host, one GPU each (nodes GPU_NODES[i] on GPU i).
TWO_GPU = ("h200x2-dummy8b",)
GPU_NODES = ("h200-gpu0", "h200-gpu1")
#: In every server environment of the two-GPU kind (KINDS.md: NVLink multicast can put the host's
#: GPUs out of service): device.sh writes them into each env file, for_gpu checks they are there.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def gpu_work_dir(index: int) -> str:
    return f"{WORK_DIR}/gpu{index}"


def gpu_env_file(index: int) -> str:
    return f"{DATA_DIR}/vllm-gpu{index}.env"


def for_gpu(spec, index: int):
    """A one-host run spec (runspec.RunSpec) moved onto GPU `index`: the runner's nvidia-smi gate watches
    that GPU, the server listens on port + index (two servers on one host), the env file shows it only
    that GPU. The plan (and its hash) is unchanged: the node is what differs, as between two hosts."""
    from dataclasses import replace
    # the runner renders argv from the port
    return replace(spec, gpu_index=index, port=spec.port + index, env_file=gpu_env_file(index))


def env_for_gpu(base_env: str, index: int) -> str:
    """The env file of GPU `index`: the device's env file plus CUDA_VISIBLE_DEVICES and multicast off."""
    lines = [ln for ln in base_env.splitlines()
             if ln.split("=", 1)[0] not in ("CUDA_VISIBLE_DEVICES", *MULTICAST_OFF)]
    lines += [f"CUDA_VISIBLE_DEVICES={index}"] + [f"{k}={v}" for k, v in MULTICAST_OFF.items()]
    return "\n".join(lines) + "\n"


def make(plans: Path, out: Path) -> list[Path]:
    from specfleet.campaign import Paths, build_run_spec, dump_run_spec, load_plan
    paths = Paths(venv=VENV, work_dir=WORK_DIR, dataset=DATASET)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for f in sorted(plans.glob("*.yml")):
        plan = load_plan(str(f))
        if plan.campaign in TWO_GPU:
            written += make_two_gpu(plan, paths, out)
            continue
        names = [c.name for c in plan.configurations]
        queue = [plan.baseline] + [n for n in names if n != plan.baseline]
        spec = build_run_spec(plan, NODE, queue, paths, env_file=ENV_FILE, run_id=f"{plan.campaign}-{NODE}")
        dst = out / f"{plan.campaign}.json"
        dst.write_text(dump_run_spec(spec))
        written.append(dst)
    return written


def make_two_gpu(plan, paths, out: Path) -> list[Path]:
    """CAMPAIGN.NODE.json for each of GPU_NODES: specfleet's split (baseline on both), for_gpu."""
    from specfleet.campaign import dump_run_spec
    from specfleet.campaign.spec import build_run_spec
    from specfleet.campaign.schedule.split import NodeInfo, split
    from specfleet.campaign import Paths
    queues = split(plan, [NodeInfo(n, "local") for n in GPU_NODES]).queues
    written = []
    for i, node in enumerate(GPU_NODES):
        # a work dir per worker, as two hosts have: the runner allows one runner per work dir (its lock)
        own = Paths(venv=paths.venv, work_dir=gpu_work_dir(i), dataset=paths.dataset)
        spec = build_run_spec(plan, node, queues[node], own, env_file=ENV_FILE, run_id=f"{plan.campaign}-{node}")
        dst = out / f"{plan.campaign}.{node}.json"
        dst.write_text(dump_run_spec(for_gpu(spec, i)))
        written.append(dst)
    return written


def stamp(spec: dict, facts: dict[str, str]) -> dict:
    """A copy of `spec` whose bench runs carry `facts` as --metadata KEY=VALUE (replacing any
    earlier stamp of the same key, so stamping twice gives the same spec)."""
    missing = [k for k in STAMP_KEYS if not facts.get(k)]
    if missing:
        raise ValueError(f"provenance facts missing: {', '.join(missing)}")
    for k, v in facts.items():
        if "\n" in str(v) or not str(v).strip():
            raise ValueError(f"provenance fact {k}={v!r} is not one line")
    out = json.loads(json.dumps(spec))
    for item in out["items"]:  # the client's --metadata pairs (specfleet/worker/runspec.py Client)
        c = item["client"]
        c["metadata"] = [kv for kv in c["metadata"] if kv[0] not in facts] + \
            [[k, facts[k]] for k in STAMP_KEYS if k in facts]
    return out


def parse_nvidia_smi(text: str) -> tuple[str, str]:
    """(name, driver) of the first GPU in `nvidia-smi --query-gpu=name,driver_version
    --format=csv,noheader` output."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise ValueError(f"unexpected nvidia-smi output: {text.strip()[:200]!r}")
    return parts[0], parts[1]


def device_facts(python: str, gpu_index: int | None = None) -> dict[str, str]:
    sel = [] if gpu_index is None else ["-i", str(gpu_index)]   # the spec's GPU (two-GPU specs: for_gpu)
    smi = subprocess.run(["nvidia-smi", *sel, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    gpu, driver = parse_nvidia_smi(smi)
    tv = subprocess.run([python, "-c", "import torch; print(torch.__version__); print(torch.version.cuda)"],
                        capture_output=True, text=True, timeout=120, check=True).stdout.split()
    return {"gpu": gpu, "driver": driver, "torch_version": tv[0], "cuda_version": tv[1], "engine": ENGINE}


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "make":
        for p in make(Path(argv[1]), Path(argv[2])):
            print(p)
        return 0
    if len(argv) in (3, 4) and argv[0] == "stamp":
        spec = json.loads(Path(argv[1]).read_text())
        facts = device_facts(argv[3] if len(argv) == 4 else sys.executable, spec.get("gpu_index"))
        spec = stamp(spec, facts)
        Path(argv[2]).write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
        print("stamped " + " ".join(f"{k}={facts[k]!r}" for k in STAMP_KEYS))
        return 0
    if len(argv) == 4 and argv[0] == "gpu-env":   # gpu-env BASE_ENV INDEX OUT (device.sh pair)
        Path(argv[3]).write_text(env_for_gpu(Path(argv[1]).read_text(), int(argv[2])))
        return 0
    print(__doc__.split("\n\n")[0], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
