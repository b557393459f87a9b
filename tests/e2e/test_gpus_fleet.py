"""`fab testbed.up --gpus G`: a worker lists G GPUs, simulated engines on disjoint
CUDA_VISIBLE_DEVICES reserve memory on their own GPUs only (docs/testbed.md, docs/engines.md)."""
from __future__ import annotations

import json
import shutil
import time

import pytest

from e2e_helpers import host_sh
from testbed import TestbedError
from testbed.seed import NFS_EXPORT

REPO_SIMVLLM = __import__("pathlib").Path(__file__).resolve().parents[2] / "testbed" / "simvllm"
QUERY = "nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,driver_version --format=csv,noheader,nounits"


def ssh_run(tb, host: str, cmd: str) -> tuple[int, str]:
    c = tb.ssh(host)
    try:
        _, out, _ = c.exec_command(cmd, timeout=30)
        return out.channel.recv_exit_status(), out.read().decode()
    finally:
        c.close()


def used(tb, host: str) -> list[int]:
    p = host_sh(tb, host, "nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits")
    assert p.returncode == 0, p.stdout + p.stderr
    return [int(x) for x in p.stdout.split()]


def wait_for(pred, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_gpus4_worker_lists_four_gpus(testbed_factory):
    tb = testbed_factory(2, gpus=4)
    for host in ("w1", "w2"):
        rc, out = ssh_run(tb, host, QUERY)  # over SSH, as the fleet asks
        rows = [r.split(", ") for r in out.splitlines()]
        assert rc == 0 and [r[0] for r in rows] == ["0", "1", "2", "3"], out
        assert len({r[1] for r in rows}) == 4 and all(r[4] == "0" for r in rows)
        rc, out = ssh_run(tb, host, "nvidia-smi -L")
        assert rc == 0 and len(out.splitlines()) == 4
        rc, out = ssh_run(tb, host, "nvidia-smi topo -m")
        assert rc == 0 and out.splitlines()[1].split("\t")[1:5] == [" X ", "NV18", "NV18", "NV18"]
    uuids = {h: ssh_run(tb, h, "nvidia-smi --query-gpu=uuid --format=csv,noheader")[1].split() for h in ("w1", "w2")}
    assert not set(uuids["w1"]) & set(uuids["w2"])  # every GPU of the fleet has its own UUID
    st = tb.status()["hosts"]["w1"]
    assert st["gpus"] == 4 and st["gpu_memory_used_mib_per_gpu"] == {0: 0, 1: 0, 2: 0, 3: 0}
    assert tb.state()["gpus"] == 4


def test_two_sims_on_disjoint_gpus_reserve_their_own(testbed_factory):
    tb = testbed_factory(1, gpus=4)
    model = f"{tb.disk_dir}/export{NFS_EXPORT}/models/Qwen3-32B"
    uuids = host_sh(tb, "w1", "nvidia-smi --query-gpu=uuid --format=csv,noheader").stdout.split()
    # the engine's code from a place the worker sees: its /tmp is private, and the checkout may be under /tmp
    simvllm = shutil.copytree(REPO_SIMVLLM, f"{tb.disk_dir}/simvllm-src",
                              ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)

    def start(visible: str, port: int, tp: int = 1) -> int:
        cmd = (f"cd / || exit 1; CUDA_VISIBLE_DEVICES={visible} SIMVLLM_LOAD_SCALE=0.0005 PYTHONPATH={simvllm} "
               f"setsid /usr/bin/python3.11 -m vllm serve {model} --host 127.0.0.1 --port {port} "
               f"--max-model-len 2048 --tensor-parallel-size {tp} >/tmp/serve-{port}.log 2>&1 </dev/null & echo $!")
        p = host_sh(tb, "w1", cmd)
        assert p.returncode == 0, p.stderr
        return int(p.stdout.strip())

    def healthy(port: int, pid: int) -> bool:
        if host_sh(tb, "w1", f"kill -0 {pid}").returncode != 0:  # died: say why now, not at the bound
            log = host_sh(tb, "w1", f"tail -5 /tmp/serve-{port}.log").stdout
            raise AssertionError(f"simulated server on port {port} exited: {log}")
        code = ("import urllib.request,sys; sys.exit(0 if urllib.request.urlopen("
                f"'http://127.0.0.1:{port}/health', timeout=2).status == 200 else 1)")
        return host_sh(tb, "w1", f"/usr/bin/python3.11 -c \"{code}\" 2>/dev/null").returncode == 0

    mib = int(0.9 * 97887)
    a = start(uuids[1], 8001)                         # by UUID, as the runner pins servers
    b = start(f"{uuids[3]},{uuids[2]}", 8002, tp=2)   # a TP=2 server on GPUs 2 and 3
    try:
        # measured: both healthy within 0.7 s of the start (2 shared cores, load ~4); 60 s is the bound for a loaded CI
        wait_for(lambda: healthy(8001, a) and healthy(8002, b), 60, "both simulated servers healthy")
        assert used(tb, "w1") == [0, mib, mib, mib]
        # a TP=2 server that sees one GPU fails like vLLM, touching nothing
        bad = host_sh(tb, "w1", f"cd / && CUDA_VISIBLE_DEVICES=0 PYTHONPATH={simvllm} /usr/bin/python3.11 -m vllm "
                                f"serve {model} --port 8003 --tensor-parallel-size 2 2>&1")
        assert bad.returncode == 1 and "World size (2) is larger than the number of available GPUs (1)" in bad.stdout
        assert used(tb, "w1") == [0, mib, mib, mib]
    finally:
        for pid in (a, b):
            host_sh(tb, "w1", f"kill -TERM {pid} 2>/dev/null; true")
    wait_for(lambda: used(tb, "w1") == [0, 0, 0, 0], 30, "every GPU's memory back")


def test_gpus_out_of_range_is_refused(testbed_factory):
    with pytest.raises(TestbedError, match="gpus must be 1..8"):
        testbed_factory(1, gpus=9)
