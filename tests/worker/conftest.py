"""Fixtures for runner tests: a fake venv with a fake `vllm`, a fake `nvidia-smi` on PATH."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specfleet.campaign.commands import Paths
from specfleet.plan import parse_plan
from specfleet.campaign.spec import build_run_spec, dump_run_spec, worker_zipapp

FAKES = Path(__file__).parent / "fakes"
SIMVLLM = Path(__file__).resolve().parents[2] / "testbed" / "simvllm"


def free_port() -> int:
    for port in range(19000 + os.getpid() % 900, 20000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port in 19000-19999")


class Bed:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.venv = tmp / "venv"
        (self.venv / "bin").mkdir(parents=True)
        shutil.copy(FAKES / "vllm", self.venv / "bin" / "vllm")
        # the venv's python, as the prompt-fit check runs it: the simulated engine's package is the
        # `vllm` it imports (the fake serves, the sim's tokenizer counts)
        py = self.venv / "bin" / "python"
        py.write_text(f"#!/bin/sh\nPYTHONPATH={SIMVLLM} exec {sys.executable} \"$@\"\n")
        py.chmod(0o755)
        self.bin = tmp / "bin"
        self.bin.mkdir()
        shutil.copy(FAKES / "nvidia-smi", self.bin / "nvidia-smi")
        self.gpu = tmp / "gpu"
        (self.gpu / "reservations").mkdir(parents=True)
        (self.gpu / "driver-loaded").touch()
        self.model = tmp / "models" / "m"
        self.model.mkdir(parents=True)
        (self.model / "config.json").write_text("{}")
        self.dataset = tmp / "q.jsonl"
        self.dataset.write_text("".join(json.dumps({"question_id": i, "turns": [f"question {i}?"]}) + "\n"
                                        for i in range(16)))
        self.env_file = tmp / "vllm.env"
        self.env_file.write_text('export FAKE_FROM_ENV_FILE="yes"  # comment\n')
        self.work = tmp / "work"
        self.port = free_port()
        self.procs: list[subprocess.Popen] = []
        # as on a worker: the worker program alone (one zipapp), no site-packages (stdlib only)
        self.runner = tmp / "runner" / "runner.pyz"
        self.runner.parent.mkdir()
        self.runner.write_bytes(worker_zipapp())

    def plan(self, faults: dict[str, str] | None = None, stop_timeout_s: float = 10, benchmark=None, **server):
        benchmark = benchmark or {}
        faults = faults or {}
        cfgs = [{"name": n, "speculative_config": sc,
                 "extra_args": ["--fake-fault", faults[n]] if n in faults else []}
                for n, sc in [("vanilla", None),
                              ("ngram", {"method": "ngram", "num_speculative_tokens": 4,
                                         "prompt_lookup_min": 2, "prompt_lookup_max": 8}),
                              ("eagle3", {"method": "eagle3", "model": str(self.model), "num_speculative_tokens": 3})]]
        return parse_plan({
            "campaign": "t", "model": {"name": "m", "candidates": ["/nonexistent/m", str(self.model)],
                                       "weights_gib": 1},
            "server": {"port": self.port, "health_timeout_s": server.pop("health_timeout_s", 20),
                       "health_poll_s": 0.5, **server},
            "configurations": cfgs, "baseline": "vanilla",
            "benchmark": {"dataset_path": str(self.dataset), "chat_template": "double", "repeat": 1,
                          "num_prompts": 16, "min_prompts_per_concurrency": 1, **benchmark},
            "gpu_memory_free_mib": 5000, "stop_timeout_s": stop_timeout_s})

    def spec(self, plan, queue=("vanilla", "ngram", "eagle3"), name="run.json"):
        spec = build_run_spec(plan, "w1", list(queue), Paths(venv=str(self.venv), work_dir=str(self.work)),
                              env_file=str(self.env_file), run_id="test-run")
        path = self.tmp / name
        path.write_text(dump_run_spec(spec))
        return path

    @property
    def run_dir(self) -> Path:
        return self.work / "t" / "w1"

    def env(self):
        return {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "FAKE_GPU_DIR": str(self.gpu)}

    def start(self, spec_path) -> subprocess.Popen:
        log = open(self.tmp / f"runner-{len(self.procs)}.log", "w")
        p = subprocess.Popen([sys.executable, "-S", str(self.runner), "--spec", str(spec_path)], stdout=log,
                             stderr=subprocess.STDOUT, env=self.env(), start_new_session=True)
        self.procs.append(p)
        return p

    def run(self, spec_path, timeout=90) -> int:
        p = self.start(spec_path)
        return p.wait(timeout=timeout)

    def state(self) -> dict:
        return json.loads((self.run_dir / "state.json").read_text())

    def items(self) -> dict:
        return {i["name"]: i for i in self.state()["items"]}

    def log(self, i=-1) -> str:
        return (self.tmp / f"runner-{len(self.procs) + i if i < 0 else i}.log").read_text()

    def gpu_used(self) -> int:
        return int(subprocess.run(["nvidia-smi", "--query-gpu=memory.used"], env=self.env(),
                                  capture_output=True, text=True).stdout)

    def reservation_pids(self) -> list[int]:
        return [int(p.name) for p in (self.gpu / "reservations").iterdir()]

    def cleanup(self):
        """End every process this test started, by PID: runners, then anything holding the fake GPU."""
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for pid in self.reservation_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


@pytest.fixture
def bed(tmp_path):
    b = Bed(tmp_path)
    yield b
    b.cleanup()
