"""Helpers for the simulated-vLLM tests (processes, ports, /proc)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIMVLLM = REPO / "testbed" / "simvllm"
FIXTURES = REPO / "tests" / "fixtures" / "vllm-0.32.0-cpu"
SAMPLE_DATASET = REPO / "datasets" / "sample" / "question.jsonl"
BASE_PYTHON = "/usr/bin/python3.11"


_USED: set[int] = set()


def free_port() -> int:
    start = 18000 + (os.getpid() * 7) % 900
    for port in list(range(start, 19000)) + list(range(18000, start)):
        if port in _USED:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                _USED.add(port)
                return port
            except OSError:
                continue
    raise RuntimeError("no free port in 18000-18999")


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def children(ppid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == ppid:
                    out.append(int(name))
        except (OSError, ValueError, IndexError):
            pass
    return out


def kill_pid(pid: int, sig=signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class Server:
    def __init__(self, venv: Path, model: Path, tmp: Path, gpu: Path, host_cfg: dict | None = None,
                 spec: dict | None = None, extra: list[str] | None = None, scale: float = 0.05,
                 env: dict | None = None):
        self.port = free_port()
        self.log_path = tmp / f"serve-{self.port}.log"
        cfg = tmp / f"sim-{self.port}.json"
        cfg.write_text(json.dumps(host_cfg or {"speed_factor": 1.0, "noise": 0.0, "fault": None}))
        self.env = {**os.environ, "SIMVLLM_TIME_SCALE": str(scale), "SIMVLLM_LOAD_SCALE": "0.002",
                    "SIMVLLM_HOST_CONFIG": str(cfg), "SIMVLLM_GPU_DIR": str(gpu), **(env or {})}
        cmd = [str(venv / "bin" / "vllm"), "serve", str(model), "--served-model-name", "bench",
               "--max-model-len", "2048", "--gpu-memory-utilization", "0.95", "--host", "127.0.0.1",
               "--port", str(self.port), "--no-enable-log-requests"]
        if spec:
            cmd += ["--speculative-config", json.dumps(spec)]
        cmd += extra or []
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)
        self.enginecore: int | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def health(self) -> int | None:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None

    def find_enginecore(self, timeout: float = 10) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for pid in children(self.proc.pid):
                if cmdline(pid)[:1] == ["VLLM::EngineCore"]:
                    self.enginecore = pid
                    return pid
            time.sleep(0.05)
        raise AssertionError("no VLLM::EngineCore child found")

    def wait_healthy(self, timeout: float = 20) -> None:
        self.find_enginecore()
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.health() == 200:
                return
            assert self.proc.poll() is None, self.tail()
            time.sleep(0.1)
        raise AssertionError("server not healthy: " + self.tail())

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            return r.read().decode()

    def tail(self, n: int = 40) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            kill_pid(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=8)
            except subprocess.TimeoutExpired:
                kill_pid(self.proc.pid)
                self.proc.wait()
        if self.enginecore and pid_alive(self.enginecore):
            kill_pid(self.enginecore)
            end = time.monotonic() + 5
            while pid_alive(self.enginecore) and time.monotonic() < end:
                time.sleep(0.05)
        self.log.close()


def run_bench(venv: Path, server: Server, model: Path, dataset: Path, out: Path, *, conc: int, n: int = 8,
              out_len: int = 64, extra: list[str] | None = None, timeout: float = 60):
    cmd = [str(venv / "bin" / "vllm"), "bench", "serve", "--backend", "openai-chat", "--base-url", server.url,
           "--endpoint", "/v1/chat/completions", "--model", "bench", "--tokenizer", str(model),
           "--dataset-name", "spec_bench", "--dataset-path", str(dataset), "--num-prompts", str(n),
           "--spec-bench-output-len", str(out_len), "--max-concurrency", str(conc), "--save-result",
           "--result-dir", str(out.parent), "--result-filename", out.name] + (extra or [])
    p = subprocess.run(cmd, capture_output=True, text=True, env=server.env, timeout=timeout)
    return p
