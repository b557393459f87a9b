"""Host environment of the simulated engine: knobs, time scales, GPU stand-in, logging.

Everything host-specific is read here:
  * `/var/lib/specfleet-testbed/sim.json` (or `$SIMVLLM_HOST_CONFIG`): speed_factor, noise, noise_seed,
    fault; beside it `noise-starts`, the count of server starts that drew noise (start_noise_seed)
  * `/var/lib/specfleet-testbed/gpu/` (or `$SIMVLLM_GPU_DIR`): gpu.json (one GPU or a list),
    modules, reservations/<pid> (`INDEX:MiB` per GPU held)
  * `$SIMVLLM_TIME_SCALE`: wall seconds per simulated GPU second (serving side sleeps sim × scale)
  * `$SIMVLLM_LOAD_SCALE`: wall seconds per simulated second of model loading
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import threading

TESTBED_DIR = "/var/lib/specfleet-testbed"
DEFAULT_TIME_SCALE = 0.05
DEFAULT_LOAD_SCALE = 0.005
FAULTS = ("die-during-load", "never-healthy", "crash-mid-bench", "leave-enginecore")

# RTX PRO 6000 Blackwell (the field report's GPU) when no gpu.json is present.
DEFAULT_GPU = {
    "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "memory_total_mib": 97887,
    "driver_version": "580.173.02",
    "cuda_version": "13.0",
    "uuid": "GPU-00000000-0000-0000-0000-000000000000",
}

NFS_BANDWIDTH = 105e6  # bytes/s, report §3.1 / §5.2
LOCAL_BANDWIDTH = 2e9  # bytes/s
ENGINE_INIT_SIM_S = 160.0  # simulated profile + KV-cache + CUDA-graph capture


def _float_env(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
        return value if value > 0 else default
    except ValueError:
        return default


def time_scale() -> float:
    return _float_env("SIMVLLM_TIME_SCALE", DEFAULT_TIME_SCALE)


def load_scale() -> float:
    return _float_env("SIMVLLM_LOAD_SCALE", DEFAULT_LOAD_SCALE)


def host_config() -> dict:
    path = os.environ.get("SIMVLLM_HOST_CONFIG") or os.path.join(TESTBED_DIR, "sim.json")
    cfg = {"speed_factor": 1.0, "noise": 0.0, "noise_seed": None, "fault": None, "path": path}
    try:
        with open(path, encoding="utf-8") as f:
            loaded = json.load(f)
        if isinstance(loaded, dict):
            cfg.update(loaded)
    except (OSError, ValueError):
        pass
    try:
        cfg["speed_factor"] = float(cfg.get("speed_factor") or 1.0)
        if cfg["speed_factor"] <= 0:
            cfg["speed_factor"] = 1.0
    except (TypeError, ValueError):
        cfg["speed_factor"] = 1.0
    try:
        cfg["noise"] = max(0.0, float(cfg.get("noise") or 0.0))
    except (TypeError, ValueError):
        cfg["noise"] = 0.0
    if not isinstance(cfg.get("noise_seed"), int) or isinstance(cfg.get("noise_seed"), bool):
        cfg["noise_seed"] = None
    if cfg.get("fault") not in FAULTS:
        cfg["fault"] = None
    return cfg


def start_noise_seed(cfg: dict) -> tuple[int, str]:
    """The seed of this server start's noise, and how it was drawn (for the server log).

    Run-to-run noise is a property of a server start (clocks, placement, what else runs), not of
    `--seed` (which every start of a plan passes alike): each start draws its own. Without
    `noise_seed` in sim.json the seed is fresh entropy; with it, `noise_seed` and this host's start
    count (the `noise-starts` file beside sim.json, counted under a lock) give a replayable sequence
    of starts that are still independent draws of one another."""
    if cfg.get("noise_seed") is None:
        return int.from_bytes(os.urandom(8), "big"), "fresh per start"
    import fcntl
    counter = os.path.join(os.path.dirname(cfg["path"]) or ".", "noise-starts")
    with open(counter, "a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read().strip()
        start = int(text) + 1 if text.isdigit() else 1
        f.seek(0), f.truncate(), f.write(f"{start}\n")
    return cfg["noise_seed"] * 1_000_003 + start, f"noise_seed {cfg['noise_seed']}, start {start} on this host"


def gpu_dir() -> str:
    return os.environ.get("SIMVLLM_GPU_DIR") or os.path.join(TESTBED_DIR, "gpu")


def gpus() -> list[dict]:
    """The node's GPUs (gpu.json): `{"gpus": [{index, uuid, name, memory_total_mib, ...}], ...}`
    with shared keys (driver_version, cuda_version) beside the list, or the single-GPU form
    (one object). Missing keys come from DEFAULT_GPU; `index` defaults to the list position."""
    try:
        with open(os.path.join(gpu_dir(), "gpu.json"), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    shared = {k: v for k, v in doc.items() if k != "gpus"}
    items = doc.get("gpus") if isinstance(doc.get("gpus"), list) else [{}]
    out = []
    for i, g in enumerate(items):
        gpu = {**DEFAULT_GPU, **shared, **(g if isinstance(g, dict) else {})}
        gpu["index"] = int(gpu.get("index", i))
        out.append(gpu)
    return out


def gpu_info() -> dict:
    return gpus()[0]


def visible_gpus(all_gpus: list[dict], value: str | None) -> list[dict]:
    """CUDA_VISIBLE_DEVICES as the CUDA runtime reads it: None (unset) -> all GPUs; else a
    comma-separated list of indexes or UUIDs (`GPU-...`, a unique prefix is enough), in that
    order; parsing stops at the first entry that names no GPU (or one already listed), so "" and
    "-1" hide every GPU."""
    if value is None:
        return list(all_gpus)
    out: list[dict] = []
    for entry in value.split(","):
        entry = entry.strip()
        if entry.isdigit():
            found = [g for g in all_gpus if g["index"] == int(entry)]
        elif entry.startswith("GPU-"):
            found = [g for g in all_gpus if str(g.get("uuid", "")).startswith(entry)]
        else:
            found = []
        if len(found) != 1 or found[0] in out:
            break
        out.append(found[0])
    return out


def nvidia_loaded() -> bool:
    """False only on a testbed worker whose stand-in driver is not loaded."""
    path = os.path.join(gpu_dir(), "modules")
    if not os.path.isdir(gpu_dir()) or not os.path.exists(path):
        return True
    try:
        with open(path, encoding="utf-8") as f:
            return "nvidia" in {line.strip() for line in f}
    except OSError:
        return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # zombies hold no memory
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def parse_reservation(text: str) -> dict[int, int]:
    """A reservations/<pid> file: whitespace-separated `INDEX:MiB` entries, one per GPU the
    process holds; a bare `MiB` is GPU 0 (the single-GPU form)."""
    out: dict[int, int] = {}
    for tok in text.split():
        idx, _, mib = tok.rpartition(":")
        try:
            i = int(idx) if idx else 0
            out[i] = out.get(i, 0) + int(float(mib))
        except ValueError:
            continue
    return out


def used_by_gpu(exclude_pid: int | None = None) -> dict[int, int]:
    """MiB held per GPU index by live processes (reservations/<pid>)."""
    rdir = os.path.join(gpu_dir(), "reservations")
    total: dict[int, int] = {}
    try:
        names = os.listdir(rdir)
    except OSError:
        return total
    for name in names:
        if not name.isdigit() or int(name) == exclude_pid or not pid_alive(int(name)):
            continue
        try:
            with open(os.path.join(rdir, name), encoding="utf-8") as f:
                held = parse_reservation(f.read())
        except OSError:
            continue
        for i, mib in held.items():
            total[i] = total.get(i, 0) + mib
    return total


def is_nfs_path(path: str) -> bool:
    real = os.path.realpath(path)
    if real.startswith("/mnt/fabrix") or path.startswith("/mnt/fabrix"):
        return True
    best, fstype = "", ""
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                    best, fstype = mnt, parts[2]
    except OSError:
        return False
    return fstype.startswith("nfs")


# ---------------------------------------------------------------- logging
_log_lock = threading.Lock()


def log(role: str, level: str, src: str, msg: str, stream=None) -> None:
    """One vLLM-format log line: `(APIServer pid=N) INFO 11-29 22:13:52 [file.py:123] msg`."""
    ts = datetime.datetime.now().strftime("%m-%d %H:%M:%S")
    line = f"({role} pid={os.getpid()}) {level} {ts} [{src}] {msg}\n"
    out = stream or sys.stdout
    with _log_lock:
        try:
            out.write(line)
            out.flush()
        except (OSError, ValueError):
            pass


def raw(text: str, stream=None) -> None:
    out = stream or sys.stdout
    with _log_lock:
        try:
            out.write(text if text.endswith("\n") else text + "\n")
            out.flush()
        except (OSError, ValueError):
            pass
