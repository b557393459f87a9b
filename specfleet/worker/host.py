"""What the worker reads of its host: processes (/proc), nvidia-smi's GPU list, the env file, the
venv's engine, the boot. Stdlib only; part of the worker program. Also the three ways a check ends
an item (ItemFailed, Fatal, Stopped), which the runner alone turns into what happens to the queue
(runner.Runner.ended), and the log line format.
"""
from __future__ import annotations

import json
import os
from contextlib import suppress
import secrets
import signal
import subprocess
import time

from . import layout


class ItemFailed(Exception):
    """This item cannot finish; the queue goes on."""


class Fatal(Exception):
    """The queue cannot go on (e.g. GPU memory not released)."""


class Stopped(Exception):
    """SIGTERM: stop cleanly, leave the current item for a resumed runner."""


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def log(msg: str) -> None:
    with suppress(OSError):  # runner.log on a full disk: the state file (reserve below) still says what happened
        print(f"{now()} {msg}", flush=True)


def kill(pid: int, sig: int, group: bool = False) -> None:
    """Signal a process (`group`: its process group) that may have ended already."""
    with suppress(ProcessLookupError):
        (os.killpg if group else os.kill)(pid, sig)


def sourced_env(path: str, env: dict) -> dict:
    """`env` after `. path` in sh, every assignment exported (`set -a`): the file read as sh reads it
    when sourced, by sh itself. specfleet writes the file with specfleet.quoting (one `export K=WORD`
    a line), so each value reads back byte for byte; whoever can write the file already sets the
    children's PATH and LD_PRELOAD, so sourcing it gives them nothing more."""
    try:
        p = subprocess.run(["/bin/sh", "-c", 'set -a && . "$1" && exec env -0', "sh", os.path.abspath(path)],
                           env=env, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ItemFailed(f"env file {path} could not be read: {e}") from None
    if p.returncode != 0:
        raise ItemFailed(f"env file {path}: sh exit {p.returncode}: {p.stderr.decode(errors='replace').strip()[-300:]}")
    pairs = (kv.split("=", 1) for kv in p.stdout.decode(errors="surrogateescape").split("\0") if "=" in kv)
    sh_own = ("PWD", "OLDPWD", "SHLVL", "_")  # what sh sets itself: the caller's values stand
    return {**{k: v for k, v in pairs if k not in sh_own}, **{k: env[k] for k in sh_own if k in env}}


def proc_stat(pid: int):
    """(state, ppid, pgrp, session) or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2]), int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def proc_argv0(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].decode(errors="replace").strip()
    except OSError:
        return ""


def proc_has_token(pid: int, token: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return token in f.read().split(b"\0")
    except OSError:
        return False


def live_pids():
    me = os.getpid()
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != me:
            st = proc_stat(int(d))
            if st and st[0] not in ("Z", "X"):
                yield int(d), st


def end_pids(pids: list[int], what: str, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL, to `pids` (logged as `what`, by PID); nothing when there are none."""
    if not pids:
        return
    log(f"ending {what} by PID: {pids}")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    st = proc_stat(pid)
    return bool(st) and st[0] not in ("Z", "X")


#: Run by <venv>/bin/python: the identity (name, version, simulated) of the `vllm` that python would
#: import, as one JSON line, WITHOUT importing it (the real vLLM imports torch: `vllm --version` took
#: 21 s on an H200): the version `vllm --version` prints, from the dist-info beside the package. An
#: engine that describes itself (specfleet-engine.json beside its __init__.py; docs/engines-gpu.md)
#: wins over any metadata, so a simulation is never recorded as a vLLM release.
ENGINE_VERSION_PY = r'''
import importlib.metadata as md, importlib.util, json, os, sys
spec = importlib.util.find_spec("vllm")
if spec is None or not spec.origin:
    sys.exit("no `vllm` package on this python's path")
ident = os.path.join(os.path.dirname(spec.origin), "specfleet-engine.json")
if os.path.isfile(ident):
    with open(ident, encoding="utf-8") as f:
        own = json.load(f)
    print(json.dumps({"name": str(own["name"]), "version": str(own["version"]), "simulated": own.get("simulated") is True}))
    sys.exit(0)
here = os.path.dirname(os.path.dirname(spec.origin))
dist = next((d for d in md.distributions(path=[here]) if (d.metadata["Name"] or "").lower() == "vllm"), None)
try:
    print(json.dumps({"name": "vllm", "version": dist.version if dist else md.version("vllm"), "simulated": False}))
except md.PackageNotFoundError:
    sys.exit(f"the `vllm` package in {here} has no `vllm` distribution metadata (vllm-*.dist-info)")
'''


def engine_identity(python: str, env: dict) -> dict:
    """The venv's engine as the worker observed it: {"name", "version" (what `<venv>/bin/vllm --version`
    would print), "simulated"}, read by the venv's python (ENGINE_VERSION_PY). Every result carries it
    (runner.bench_metadata), so no other code needs to guess which engine measured."""
    try:  # cwd /: `python -c` puts the cwd first on sys.path, a stray vllm/ there must not count
        p = subprocess.run([python, "-c", ENGINE_VERSION_PY], capture_output=True, text=True, timeout=120,
                           env=env, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ItemFailed(f"the engine version could not be read: {python} could not run: {e}") from None
    lines = [x.strip() for x in p.stdout.splitlines() if x.strip()]
    try:
        ident = json.loads(lines[-1]) if p.returncode == 0 and lines else None
    except ValueError:
        ident = None
    if not isinstance(ident, dict) or not ident.get("version"):
        raise ItemFailed(f"the engine version could not be read: {python} exit {p.returncode}: "
                         f"{(p.stdout + p.stderr).strip()[-500:]}")
    return ident


GPU_TABLE_FIELDS = ("index", "uuid", "name", "memory.used")


def gpu_table(env) -> list[dict]:
    """Every GPU nvidia-smi lists: [{index, uuid, name, used}] (memory.used in MiB), one query for all
    of them (parsed by smi_row); asked again twice when it fails
    (every lane's memory gate asks it, at once on a busy node)."""
    cmd = ["nvidia-smi", f"--query-gpu={','.join(GPU_TABLE_FIELDS)}", "--format=csv,noheader,nounits"]
    for attempt in range(3):
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
        except (OSError, subprocess.TimeoutExpired) as e:
            why = f"GPU not visible: nvidia-smi could not run: {e}"
        else:
            why = f"GPU not visible: nvidia-smi exit {p.returncode}: {(p.stdout + p.stderr).strip()[-300:]} " \
                "(after a reboot check that the nvidia module is loaded: modprobe nvidia)"
            if p.returncode == 0:
                break
        if attempt == 2:
            raise ItemFailed(why)
        time.sleep(1.0)
    out = []
    for line in p.stdout.splitlines():
        if not line.strip():
            continue
        row = smi_row(line, GPU_TABLE_FIELDS)
        try:
            out.append({"index": int(row["index"]), "uuid": row["uuid"], "name": row["name"],
                        "used": int(float(row["memory.used"]))})
        except (ValueError, TypeError):
            raise ItemFailed(f"nvidia-smi printed an unexpected GPU line: {line.strip()[:200]!r}") from None
    return out


def smi_row(line: str, fields) -> dict[str, str] | None:
    """One line of `nvidia-smi --query-gpu=<fields> --format=csv,noheader[,nounits]` as {field: cell},
    cells stripped; None when its cells do not match the fields. The one parser of nvidia-smi's GPU
    lines: the runner's GPU table, the telemetry sampler and the bastion's Gpus fact call it. A GPU
    name may hold commas: the cells around it are fixed."""
    cells = [c.strip() for c in line.split(",")]
    extra = len(cells) - len(fields)
    if extra > 0 and "name" in fields:
        i = list(fields).index("name")
        cells[i:i + extra + 1] = [", ".join(cells[i:i + extra + 1])]
    elif extra:
        return None
    return dict(zip(fields, cells))


def env_without_devices(env: dict | None) -> dict:
    """nvidia-smi ignores CUDA_VISIBLE_DEVICES, a stand-in might not: the table lists every GPU."""
    return {k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"} if env else dict(os.environ)


def boot_identity() -> str:
    """Changes with every boot: the kernel's boot_id and a token in /tmp (emptied at boot; also
    what tells a testbed worker's reboot apart, as its kernel is the machine's)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "?"
    marker = layout.boot_marker(os.getuid())
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, secrets.token_hex(8).encode())
        os.close(fd)
    except FileExistsError:
        pass
    except OSError:
        return boot
    try:
        with open(marker) as f:
            return f"{boot}/{f.read().strip()}"
    except OSError:
        return boot


def atomic_write(path: str, data: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
