"""The `VLLM::EngineCore` child process of the simulated `vllm serve`.

Started by the API server through `bash -c 'exec -a VLLM::EngineCore python -m vllm._enginecore'`
so its argv[0] (and, via prctl, its comm) is `VLLM::EngineCore` as with vLLM's setproctitle.
It holds the "GPU memory" (a reservation file of the testbed's GPU stand-in), simulates the
model load, reports KV-cache numbers to the API server over an inherited pipe, then idles
until SIGTERM. Like vLLM's EngineCore (docs/engines.md, "Processes") it has NO parent-death detection: if the API
server is SIGKILLed it keeps running and keeps its memory.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time

from vllm import simenv

ROLE = "EngineCore"
GIB = 1024 ** 3


def set_comm(name: str) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def log(level: str, src: str, msg: str) -> None:
    simenv.log(ROLE, level, src, msg)


class Reservation:
    def __init__(self) -> None:
        self.path: str | None = None

    def take(self, mib: int, indexes: list[int]) -> None:
        """Hold `mib` on each GPU of `indexes`: one file, `INDEX:MiB` per GPU, or the single-GPU
        form (a bare MiB, which means GPU 0) when GPU 0 is the only one (docs/dev/contracts.md)."""
        rdir = os.path.join(simenv.gpu_dir(), "reservations")
        if not os.path.isdir(rdir):
            return  # not on a testbed worker
        path = os.path.join(rdir, str(os.getpid()))
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write((f"{int(mib)}" if list(indexes) == [0] else " ".join(f"{i}:{int(mib)}" for i in indexes))
                    + "\n")
        os.replace(tmp, path)
        self.path = path

    def release(self) -> None:
        if self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            self.path = None


RES = Reservation()


def traceback_exit(lines: list[str], code: int = 1) -> None:
    log("ERROR", "core.py:1012", "EngineCore failed to start.")
    simenv.raw("Traceback (most recent call last):\n" + "\n".join(lines), sys.stderr)
    RES.release()
    os._exit(code)


def oom_traceback(free_gib: float, total_gib: float) -> list[str]:
    return [
        '  File "/vllm-venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 1002, in run_engine_core',
        "    engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)",
        '  File "/vllm-venv/lib/python3.11/site-packages/vllm/v1/worker/gpu_model_runner.py", line 3871, in load_model',
        "    self.model = model_loader.load_model(vllm_config=self.vllm_config, model_config=self.model_config)",
        '  File "/vllm-venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1355, in convert',
        "    return t.to(device, dtype if t.is_floating_point() or t.is_complex() else None, non_blocking)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.56 GiB. GPU 0 has a total "
        f"capacity of {total_gib:.2f} GiB of which {free_gib:.2f} GiB is free. Including non-PyTorch "
        "memory, this process has 0 bytes memory in use. (SIMULATED by specfleet-simvllm: fault "
        "die-during-load)",
    ]


def crash(signum, frame) -> None:  # SIGUSR1: the crash-mid-bench fault
    log("ERROR", "core.py:1121", "EngineCore encountered a fatal error.")
    simenv.raw("\n".join([
        "Traceback (most recent call last):",
        '  File "/vllm-venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 1113, in run_busy_loop',
        "    self._process_engine_step()",
        '  File "/vllm-venv/lib/python3.11/site-packages/vllm/v1/worker/gpu_model_runner.py", line 2611, in execute_model',
        "    valid_sampled_token_ids = sampled_token_ids.tolist()",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
        "below might be incorrect. (SIMULATED by specfleet-simvllm: fault crash-mid-bench)",
    ]), sys.stderr)
    RES.release()
    os._exit(1)


def shutdown(signum, frame) -> None:
    name = signal.Signals(signum).name
    log("INFO", "core.py:1454", f"[shutdown] EngineCore: trigger received signal={name}")
    RES.release()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    set_comm("VLLM::EngineCore")
    cfg = json.loads((argv or sys.argv[1:])[0])
    ready_fd = int(cfg["ready_fd"])
    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    signal.signal(signal.SIGUSR1, crash)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    host = simenv.host_config()
    by_index = {g["index"]: g for g in simenv.gpus()}
    mine = [by_index[i] for i in cfg.get("gpus", [0]) if i in by_index]
    tp = int(cfg.get("tensor_parallel_size") or 1)
    if not mine:
        traceback_exit([
            '  File "/vllm-venv/lib/python3.11/site-packages/vllm/v1/worker/gpu_worker.py", line 236, in init_device',
            "    torch.cuda.set_device(self.device)",
            '  File "/vllm-venv/lib/python3.11/site-packages/torch/cuda/__init__.py", line 372, in _lazy_init',
            "    torch._C._cuda_init()",
            "RuntimeError: No CUDA GPUs are available (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r} leaves none visible)",
        ])
    total_mib = min(int(g["memory_total_mib"]) for g in mine)
    util = float(cfg["gpu_memory_utilization"])
    total_gib = total_mib / 1024

    log("INFO", "core.py:133",
        f"Initializing a V1 LLM engine (v0.32.0) with config: model='{cfg['model']}', "
        f"speculative_config={cfg['spec_repr']}, tokenizer='{cfg['model']}', dtype=torch.bfloat16, "
        f"max_seq_len={cfg['max_model_len']}, load_format={cfg['load_format']}, tensor_parallel_size={tp}, "
        f"pipeline_parallel_size=1, data_parallel_size=1, seed={cfg['seed']}, "
        f"served_model_name={cfg['served_model_name']}, enable_prefix_caching=True, "
        f"enable_chunked_prefill=True  [SIMULATED engine: no GPU work is done]")

    used = simenv.used_by_gpu(exclude_pid=os.getpid())
    want_mib = util * total_mib
    for rank, g in enumerate(mine):  # each TP worker checks its own device (cuda:<local rank>)
        free_mib = int(g["memory_total_mib"]) - used.get(g["index"], 0)
        if free_mib >= want_mib:
            continue
        traceback_exit([
            '  File "/vllm-venv/lib/python3.11/site-packages/vllm/v1/worker/gpu_worker.py", line 281, in init_device',
            "    self.requested_memory = request_memory(init_snapshot, self.cache_config)",
            '  File "/vllm-venv/lib/python3.11/site-packages/vllm/v1/worker/utils.py", line 412, in request_memory',
            "    raise ValueError(",
            f"ValueError: Free memory on device cuda:{rank} ({free_mib / 1024:.2f}/{total_gib:.2f} GiB) on startup "
            f"is less than desired GPU memory utilization ({util}, {want_mib / 1024:.2f} GiB). Decrease "
            "GPU memory utilization or reduce GPU memory used by other processes.",
        ])
    RES.take(int(want_mib), [g["index"] for g in mine])
    if tp > 1:
        log("INFO", "multiproc_executor.py:720", f"SIMULATED tensor parallelism: {tp} ranks on GPUs "
            f"{', '.join(str(g['index']) for g in mine)} (no VLLM::Worker_TP* processes; this process holds "
            "the memory of every rank)")

    log("INFO", "gpu_model_runner.py:3860", f"Starting to load model {cfg['model']}...")
    weights_gib = float(cfg["weights_gib"]) / tp  # each rank holds its shard
    bw = simenv.NFS_BANDWIDTH if cfg["nfs"] else simenv.LOCAL_BANDWIDTH
    # the ranks read their shards at once over the same storage link: the whole checkpoint's time
    read_s = float(cfg["weights_gib"]) * GIB / bw if cfg["load_format"] != "dummy" else 0.5
    scale = simenv.load_scale()
    fault = host["fault"]
    if fault == "never-healthy":
        log("INFO", "default_loader.py:291", "Loading safetensors checkpoint shards:   0% Completed")
        while True:
            time.sleep(3600)
    if fault == "die-during-load":
        time.sleep(min(read_s * scale * 0.3, 5.0))
        traceback_exit(oom_traceback(free_gib=0.19, total_gib=total_gib))
    time.sleep(read_s * scale)
    log("INFO", "default_loader.py:291",
        f"Loading weights took {read_s:.2f} seconds (simulated; storage "
        f"{'NFS ~105 MB/s' if cfg['nfs'] else 'local ~2 GB/s'})")
    if cfg["spec_method"] in ("eagle", "eagle3") and cfg.get("draft_model"):
        log("INFO", "eagle.py:1136", f"Loading drafter model {cfg['draft_model']}...")
    log("INFO", "gpu_model_runner.py:3920",
        f"Model loading took {weights_gib:.2f} GiB memory and {read_s + 2.1:.6f} seconds")

    if weights_gib > util * total_gib:
        traceback_exit(oom_traceback(free_gib=max(0.0, util * total_gib - weights_gib % 1), total_gib=total_gib))
    init_s = simenv.ENGINE_INIT_SIM_S
    time.sleep(init_s * scale)
    overhead_gib = 4.43 if weights_gib > 8 else 0.6
    kv_gib = util * total_gib - weights_gib - overhead_gib
    if kv_gib <= 0:
        traceback_exit([
            '  File "/vllm-venv/lib/python3.11/site-packages/vllm/v1/core/kv_cache_utils.py", line 1012, in check_enough_kv_cache_memory',
            "    raise ValueError(",
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine.",
        ])
    log("INFO", "gpu_worker.py:424", f"Available KV cache memory: {kv_gib:.2f} GiB")
    per_token = int(cfg["kv_bytes_per_token"])
    kv_tokens = int(kv_gib * GIB / (per_token / tp)) // 16 * 16  # KV heads are split over the ranks
    max_len = int(cfg["max_model_len"])
    if kv_tokens < max_len:
        traceback_exit([
            '  File "/vllm-venv/lib/python3.11/site-packages/vllm/v1/core/kv_cache_utils.py", line 1031, in check_enough_kv_cache_memory',
            "    raise ValueError(",
            f"ValueError: To serve at least one request with the models's max seq len ({max_len}), "
            f"{max_len * per_token / GIB:.2f} GiB KV cache is needed, which is larger than the available "
            f"KV cache memory ({kv_gib:.2f} GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`.",
        ])
    log("INFO", "kv_cache_utils.py:1291", f"GPU KV cache size: {kv_tokens:,} tokens")
    log("INFO", "kv_cache_utils.py:1296",
        f"Maximum concurrency for {max_len:,} tokens per request: {kv_tokens / max_len:.2f}x")
    log("INFO", "gpu_model_runner.py:4805",
        f"Graph capturing finished in {init_s * 0.15:.0f} secs, took 0.87 GiB")
    log("INFO", "core.py:402",
        f"init engine (profile, create kv cache, warmup model) took {init_s:.2f} seconds (simulated)")
    msg = json.dumps({"ok": True, "kv_tokens": kv_tokens, "kv_gib": kv_gib}) + "\n"
    try:
        os.write(ready_fd, msg.encode())
        os.close(ready_fd)
    except OSError:
        pass
    while True:  # the engine's busy loop lives in the API server; this process holds the memory
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
