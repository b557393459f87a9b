"""What one Slurm job step runs on one node: a part of the worker program, in the one runner.pyz.

    runner.pyz slurm-step check --dir D --token T    every node: the shared path is shared (D/token holds
                                                     T), then D/nodes/<node>.json records what Slurm allocated
    runner.pyz slurm-step run --dir D --campaign C   every node: the runner on this node's run spec, with
                                                     the allocation's GPUs and a free port, then the probe
    runner.pyz slurm-step site-check --dir D         fab provision: this node's fact probes, output to the
                                                     shared path (specfleet/slurm/site_check.py decides)

The bastion placed one run spec per node (D/slurm/specs.json: each node's queue and provenance
probe). `run` places
it in the node's run folder (D/<node>/<campaign>/<node>/run.json, as over SSH) and writes
run.slurm.json beside it: the same spec with
- the GPUs Slurm allocated (the step's CUDA_VISIBLE_DEVICES; the allocation wins over nvidia-smi,
  which lists every GPU of the node): spec GPU k becomes allocated GPU k, groups and pins follow;
- a server port no other job on the node uses (two jobs sharing a node never collide): the first
  base port from a job-id-derived start whose ports (one per GPU) are all free.
Item hashes stay the bastion's, so a requeued job's runner skips every cell already done.
Exit codes: the runner's; 2 = no run spec for this node, 3 = the shared path is not shared.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

from . import layout

EXIT_NO_SPEC, EXIT_NOT_SHARED = 2, 3
PORT_RANGE = (20000, 60000)


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def allocated_gpus(env: dict) -> list[int]:
    """GPU indices of this step's allocation: CUDA_VISIBLE_DEVICES as slurmd sets it, else SLURM_STEP_GPUS /
    SLURM_JOB_GPUS; [] when the job has no GPU GRES."""
    for key in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        words = [w for w in env.get(key, "").split(",") if w.strip()]
        if words and all(w.strip().isdigit() for w in words):
            return [int(w) for w in words]
    return []


def runner_zipapp() -> str:
    """The runner.pyz this module runs from (<bin>/runner.pyz/specfleet_worker/slurm_step.py): the run
    step starts the runner from the same file, in a process of its own."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_ports(host: str, count: int, start: int) -> int:
    """The first base port >= start (wrapping in PORT_RANGE) with `count` free consecutive ports."""
    lo, hi = PORT_RANGE
    span = hi - lo - count
    for k in range(0, span, count):
        base = lo + (start - lo + k) % span
        socks = []
        try:
            for p in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind((host, p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {count} free consecutive ports on {host}")


def effective_spec(spec: dict, gpus: list[int], port: int) -> dict:
    """The bastion's spec on this allocation: pure (spec, allocated GPU indices, base port) -> spec."""
    out = json.loads(json.dumps(spec))
    out["port"] = port
    if out.get("gpus"):
        if len(gpus) < len(out["gpus"]):
            raise ValueError(f"the split planned {len(out['gpus'])} GPUs on this node, Slurm allocated "
                             f"{len(gpus)} ({','.join(map(str, gpus)) or 'none'})")
        remap = {g["index"]: gpus[k] for k, g in enumerate(out["gpus"])}
        out["gpus"] = [{"index": remap[g["index"]], **({"name": g["name"]} if g.get("name") else {})}
                       for g in out["gpus"]]  # the UUID comes from nvidia-smi for the new index
        if out.get("gpu_groups"):
            out["gpu_groups"] = [[remap[i] for i in grp] for grp in out["gpu_groups"]]
        for it in out["items"]:
            if "gpu_pin" in it:
                it["gpu_pin"] = remap[it["gpu_pin"]]
    elif gpus:
        out["gpu_index"] = gpus[0]
    out["slurm"] = {k: os.environ.get(v) for k, v in (
        ("job_id", "SLURM_JOB_ID"), ("step_id", "SLURM_STEP_ID"), ("node", "SLURMD_NODENAME"),
        ("restart_count", "SLURM_RESTART_COUNT"), ("cuda_visible_devices", "CUDA_VISIBLE_DEVICES"))}
    return out


def check(d: str, token: str) -> int:
    node = node_name()
    try:
        with open(os.path.join(d, "token")) as f:
            seen = f.read().strip()
    except OSError:
        seen = None
    if seen != token:
        print(f"specfleet: shared_dir {d} is not shared: node {node} does not see the token the bastion wrote "
              f"there ({'absent' if seen is None else 'another token'})", file=sys.stderr, flush=True)
        return EXIT_NOT_SHARED
    rec = {"node": node, "hostname": socket.gethostname(), "job_id": os.environ.get("SLURM_JOB_ID"),
           "restart_count": int(os.environ.get("SLURM_RESTART_COUNT") or 0),
           "gpus": allocated_gpus(dict(os.environ)), "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    os.makedirs(os.path.join(d, "nodes"), exist_ok=True)
    _place(os.path.join(d, "nodes", f"{node}.json"), json.dumps(rec).encode())
    return 0


def _place(path: str, data: bytes) -> None:
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def run(d: str, campaign: str, python: str) -> int:
    node = node_name()
    rdir = layout.run_dir(os.path.join(d, node), campaign, node)
    placed = os.path.join(d, "slurm", "specs.json")
    try:
        with open(placed, "rb") as f:
            mine = json.load(f)[node]
        spec, probe = mine["run_spec"], mine.get("provenance_probe")
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"specfleet: node {node} has no run spec in {placed} ({type(e).__name__}: {e}): the job runs on "
              "nodes the split did not plan (run `fab bench` again)", file=sys.stderr, flush=True)
        return EXIT_NO_SPEC
    os.makedirs(rdir, exist_ok=True)  # the node's run folder: the runner reads its spec there, as over SSH
    # as campaign.spec.dump_run_spec writes it over SSH (the worker imports nothing of specfleet's)
    _place(os.path.join(rdir, layout.RUN_SPEC), (json.dumps(spec, indent=2, sort_keys=True) + "\n").encode())
    gpus = allocated_gpus(dict(os.environ))
    job = int(os.environ.get("SLURM_JOB_ID") or 0)
    count = max(1, len(spec.get("gpus") or []))
    port = free_ports(spec.get("server_host") or "127.0.0.1", count, PORT_RANGE[0] + (job * 16) % 30000)
    try:
        eff = effective_spec(spec, gpus, port)
    except ValueError as e:
        print(f"specfleet: node {node}: {e}", file=sys.stderr, flush=True)
        return EXIT_NO_SPEC
    path = os.path.join(rdir, "run.slurm.json")
    _place(path, json.dumps(eff, indent=2, sort_keys=True).encode())
    # Slurm signals the step's process group (time limit: --signal=TERM@s; scancel; requeue): the runner,
    # in this group, gets it and stops its server cleanly; this process waits for it to finish
    signal.signal(signal.SIGTERM, lambda *_: None)
    with open(os.path.join(rdir, layout.RUNNER_LOG), "ab") as log:
        log.write(f"==== slurm job {job} step on {node}: GPUs {gpus or 'none'}, port {port}\n".encode())
        log.flush()
        rc = subprocess.call([python, "-S", runner_zipapp(), "--spec", path],
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/")
    if probe:  # provenance, read on the node (collect has no SSH under Slurm)
        with open(os.path.join(rdir, "provenance.probe"), "w") as out:
            subprocess.run(["/bin/sh", "-s"], input=probe.encode(), stdout=out, stderr=subprocess.DEVNULL, cwd="/")
    return rc


def site_check(d: str) -> int:
    """fab provision under Slurm: this node's probe batch (d/scripts.json), its output to d/out/<node>.json."""
    node = node_name()
    try:
        with open(os.path.join(d, "scripts.json")) as f:
            mine = json.load(f)[node]
    except (OSError, ValueError, KeyError) as e:
        print(f"specfleet: node {node} has no site check in {d} ({type(e).__name__}: {e})", file=sys.stderr,
              flush=True)
        return EXIT_NO_SPEC
    argv = ["bash", "-c", mine["script"]]
    if mine.get("root") and os.geteuid() != 0:
        argv = ["sudo", "-n", "--", *argv]
    p = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, cwd="/")
    os.makedirs(os.path.join(d, "out"), exist_ok=True)
    _place(os.path.join(d, "out", f"{node}.json"), json.dumps({
        "node": node, "job_id": os.environ.get("SLURM_JOB_ID"), "rc": p.returncode,
        "stdout": p.stdout.decode(errors="replace"), "stderr": p.stderr.decode(errors="replace")[-2000:]}).encode())
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="runner.pyz slurm-step", description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("check", "run", "site-check"))
    ap.add_argument("--dir", required=True)
    ap.add_argument("--token", default="")
    ap.add_argument("--campaign", default="")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args(argv)
    if a.what == "site-check":
        return site_check(a.dir)
    return check(a.dir, a.token) if a.what == "check" else run(a.dir, a.campaign, a.python)
