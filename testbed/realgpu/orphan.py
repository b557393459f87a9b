#!/usr/bin/env python3
"""The orphan check on a real GPU: vLLM's known failure is an EngineCore that outlives a SIGKILLed
API server and keeps its GPU memory. Stdlib only.

    orphan.py BASE_SPEC RUNNER_PY OUT_JSON

Runs specfleet's runner on a one-item spec derived from BASE_SPEC (its baseline item, eager mode
so the server starts fast, the highest concurrency with 8x the prompts so the benchmark is still
running), SIGKILLs the API server (the state's server_pid) once the item is benchmarking, and
records: the VLLM:: processes before and just after the kill (does the EngineCore survive its
parent?), then, after the runner has handled it, whether the item is recorded as failed (a
crashed run never records success), leftover VLLM:: processes, GPU memory, and the seconds from
the kill to the GPU memory being free. `ok` is true only when all of those hold.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

CAMPAIGN = "h200-orphan"


def derive_spec(base: dict, campaign: str = CAMPAIGN) -> dict:
    """One item (the base spec's first = the baseline), eager, last bench only, 8x prompts,
    every path moved from the base campaign's folder to `campaign`'s."""
    s = json.loads(json.dumps(base).replace(f"/{base['campaign']}/", f"/{campaign}/"))
    item = s["items"][0]
    item["serve"]["extra_args"] = item["serve"]["extra_args"] + ["--enforce-eager"]
    b = item["bench"][-1]
    b["num_prompts"] = 8 * b["num_prompts"]
    item["bench"] = [b]
    item["item_hash"] = "orphan-check"
    s.update(campaign=campaign, run_id=f"{campaign}-{s['host']}", items=[item])
    return s


def vllm_procs() -> list[dict]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{d}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        a0 = argv[0].decode(errors="replace")
        text = b" ".join(argv).decode(errors="replace")
        if a0.startswith("VLLM::") or "vllm.entrypoints" in text:
            out.append({"pid": int(d), "ppid": int(st[1]), "pgid": int(st[2]), "argv0": a0[:60]})
    return out


def gpu_used_mib() -> int:
    p = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=60)
    return max(int(x) for x in p.stdout.split())


def read_state(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def verdict(rec: dict, threshold_mib: int) -> tuple[bool, list[str]]:
    """Whether the runner handled the kill: the item failed (not done), no VLLM:: process left,
    GPU memory below the spec's threshold. Reasons for a False."""
    why = []
    if rec.get("killed_pid") is None:
        why.append("the API server was never killed (the item did not reach benchmarking)")
    if rec.get("item_status") == "done":
        why.append("the item was recorded as done after its server was killed")
    if rec.get("leftover_after"):
        why.append(f"VLLM:: processes left: {rec['leftover_after']}")
    used = rec.get("gpu_used_after_mib")
    if used is None or used >= threshold_mib:
        why.append(f"GPU memory after the runner: {used} MiB (threshold {threshold_mib})")
    return not why, why


def main(argv: list[str]) -> int:
    base_path, runner, out_path = argv
    with open(base_path) as f:
        spec = derive_spec(json.load(f))
    run_dir = os.path.join(spec["work_dir"], spec["campaign"], spec["host"])
    os.makedirs(run_dir, exist_ok=True)
    spec_path = os.path.join(os.path.dirname(base_path), f"{CAMPAIGN}.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f, indent=2)
    state_path = os.path.join(run_dir, "state.json")
    rec: dict = {"spec": spec_path, "killed_pid": None}
    t0 = time.time()
    with open(os.path.join(run_dir, "runner.log"), "w") as lf:
        p = subprocess.Popen([sys.executable, runner, "--spec", spec_path], stdout=lf, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        while p.poll() is None:
            st = read_state(state_path)
            item = (st or {}).get("items", [{}])[0]
            if item.get("status") == "benchmarking" and rec["killed_pid"] is None and "kill_error" not in rec:
                time.sleep(1.0)   # requests in flight
                rec["before_kill"] = vllm_procs()
                rec["gpu_used_before_mib"] = gpu_used_mib()
                pid = item["server_pid"]
                rec["t_healthy_s"] = round(time.time() - t0, 1)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    rec["kill_error"] = f"server pid {pid} had already exited"
                    continue
                t_kill = time.time()
                rec["killed_pid"] = pid
                time.sleep(0.05)  # before the runner's 0.2 s liveness poll ends the group
                rec["after_kill"] = vllm_procs()
                rec["engine_core_survived_parent"] = any(x["argv0"].startswith("VLLM::EngineCore")
                                                         for x in rec["after_kill"])
                while time.time() - t_kill < 120:
                    if gpu_used_mib() < spec["gpu_memory_free_mib"]:
                        rec["kill_to_gpu_free_s"] = round(time.time() - t_kill, 2)
                        break
                    time.sleep(0.2)
            time.sleep(0.1)
        rec["runner_exit"] = p.returncode
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(60)
    st = read_state(state_path) or {}
    item = (st.get("items") or [{}])[0]
    rec.update(item_status=item.get("status"), item_error=(item.get("error") or "")[:400],
               runner_status=st.get("status"), leftover_after=vllm_procs(), gpu_used_after_mib=gpu_used_mib())
    rec["ok"], rec["problems"] = verdict(rec, spec["gpu_memory_free_mib"])
    if "kill_error" in rec:
        rec["problems"].append(rec["kill_error"])
    with open(out_path, "w") as f:
        json.dump(rec, f, indent=2)
    print(json.dumps({k: rec.get(k) for k in ("ok", "problems", "engine_core_survived_parent",
                                              "kill_to_gpu_free_s", "item_status", "runner_exit")}))
    return 0 if rec["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
