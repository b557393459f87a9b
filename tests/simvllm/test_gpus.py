"""Several GPUs: CUDA_VISIBLE_DEVICES and --tensor-parallel-size on the simulated engine, and the
nvidia-smi stand-in's per-GPU answers (real processes; the stand-in state in a temporary dir)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simvllm_helpers import REPO, run_bench
from tests.shared_data import SPEC_BENCH

STANDIN = REPO / "testbed" / "host" / "gpu-standin"
MIB = int(0.95 * 97887)


@pytest.fixture
def gpu4(tmp_path) -> Path:
    sys.path.insert(0, str(REPO))
    from testbed.seed import gpu_json  # the testbed's own G-GPU state (fab testbed.up --gpus 4)
    d = tmp_path / "gpu4"
    (d / "reservations").mkdir(parents=True)
    (d / "gpu.json").write_text(json.dumps(gpu_json("w1", 4)))
    (d / "modules").write_text("nvidia\nnvidia_uvm\n")
    return d


def smi(gpu: Path, *args: str) -> subprocess.CompletedProcess:
    link = gpu / "nvidia-smi"  # the stand-in picks its tool by argv[0]
    if not link.exists():
        shutil.copyfile(STANDIN, link)
        link.chmod(0o755)
    return subprocess.run([str(link), *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "SIMVLLM_GPU_DIR": str(gpu)})


def used(gpu: Path) -> list[int]:
    p = smi(gpu, "--query-gpu=memory.used", "--format=csv,noheader,nounits")
    assert p.returncode == 0, p.stdout
    return [int(x) for x in p.stdout.split()]


def test_standin_lists_every_gpu_in_real_formats(gpu4):
    p = smi(gpu4, "--query-gpu=index,uuid,name,memory.total,memory.used,driver_version",
            "--format=csv,noheader,nounits")
    rows = [r.split(", ") for r in p.stdout.splitlines()]
    assert [r[0] for r in rows] == ["0", "1", "2", "3"] and len({r[1] for r in rows}) == 4
    assert all(r[1].startswith("GPU-") and r[3] == "97887" and r[4] == "0" for r in rows)
    listing = smi(gpu4, "-L").stdout.splitlines()
    assert [line.split(":")[0] for line in listing] == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]
    assert all(f"(UUID: {r[1]})" in line for r, line in zip(rows, listing))
    topo = smi(gpu4, "topo", "-m").stdout.splitlines()
    assert topo[0].split("\t")[1:5] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert topo[2].split("\t")[1:5] == ["NV18", " X ", "NV18", "NV18"]
    one = smi(gpu4, f"--id={rows[2][1]}", "--query-gpu=index", "--format=csv,noheader")
    assert one.stdout == "2\n"
    assert smi(gpu4, "-i", "9", "-L").returncode == 6
    hdr = smi(gpu4, "--query-gpu=memory.used", "--format=csv").stdout.splitlines()[0]
    assert hdr == "memory.used [MiB]"


def test_disjoint_visible_devices_reserve_their_own_gpus(servers, gpu4):
    uuids = [g["uuid"] for g in json.loads((gpu4 / "gpu.json").read_text())["gpus"]]
    one = servers(gpu=gpu4, env={"CUDA_VISIBLE_DEVICES": "1"})
    tp2 = servers(gpu=gpu4, env={"CUDA_VISIBLE_DEVICES": f"{uuids[3]},{uuids[2]}"},
                  extra=["--tensor-parallel-size", "2"])
    one.wait_healthy()
    tp2.wait_healthy()
    assert used(gpu4) == [0, MIB, MIB, MIB]
    apps = smi(gpu4, "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits").stdout
    assert sorted(apps.splitlines()) == sorted([f"{one.enginecore}, {uuids[1]}, {MIB}",
                                                f"{tp2.enginecore}, {uuids[2]}, {MIB}",
                                                f"{tp2.enginecore}, {uuids[3]}, {MIB}"])
    assert "tensor_parallel_size=2" in tp2.tail(80)
    # GPU 1 is taken: a third server there fails as vLLM does, GPU 0 stays free
    third = servers(gpu=gpu4, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert third.proc.wait(timeout=20) == 1
    assert "less than desired GPU memory utilization" in third.tail()
    one.stop()
    assert used(gpu4) == [0, 0, MIB, MIB]
    tp2.stop()
    assert used(gpu4) == [0, 0, 0, 0]


@pytest.mark.parametrize("visible,tp,needle", [
    ("0", 2, "World size (2) is larger than the number of available GPUs (1) in this node"),
    ("0,1,7,2", 4, "World size (4) is larger than the number of available GPUs (2)"),  # stops at 7
    ("", 1, "No CUDA GPUs are available"),
])
def test_too_few_visible_gpus_fail_like_vllm(servers, gpu4, visible, tp, needle):
    srv = servers(gpu=gpu4, env={"CUDA_VISIBLE_DEVICES": visible}, extra=["--tensor-parallel-size", str(tp)])
    assert srv.proc.wait(timeout=20) == 1
    assert needle in srv.tail(60)
    assert used(gpu4) == [0, 0, 0, 0]


def test_tensor_parallel_is_faster(servers, simvenv, model_dir, dataset, tmp_path, gpu4):
    tpot = {}
    for tp in (1, 2):
        srv = servers(gpu=gpu4, extra=["--tensor-parallel-size", str(tp)], scale=0.02)
        srv.wait_healthy()
        out = tmp_path / f"tp{tp}.json"
        p = run_bench(simvenv, srv, model_dir, dataset, out, conc=4, n=8, out_len=64, extra=["--temperature", "0"])
        assert p.returncode == 0, p.stderr
        tpot[tp] = json.loads(out.read_text())["mean_tpot_ms"]
        srv.stop()
    assert 1.3 < tpot[1] / tpot[2] < 2.0, tpot


def test_category_reaches_the_engine_and_counters_stay_consistent(servers, simvenv, model_dir, tmp_path):
    if not SPEC_BENCH.exists():
        pytest.skip(f"{SPEC_BENCH} (the full Spec-Bench file) is not on this machine")
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 128}
    srv = servers(spec=spec, scale=0.01)
    srv.wait_healthy()
    got = {}
    for cat in ("summarization", "translation"):
        out = tmp_path / f"{cat}.json"
        p = run_bench(simvenv, srv, model_dir, SPEC_BENCH, out, conc=8, n=16, out_len=128,
                      extra=["--temperature", "0", "--spec-bench-category", cat, "--save-detailed"])
        assert p.returncode == 0, p.stderr
        got[cat] = json.loads(out.read_text())
        r = got[cat]
        assert r["spec_decode_draft_tokens"] == 4 * r["spec_decode_num_drafts"]
        assert r["spec_decode_acceptance_length"] == pytest.approx(
            1 + r["spec_decode_accepted_tokens"] / r["spec_decode_num_drafts"])
    s, t = got["summarization"], got["translation"]
    assert s["spec_decode_num_drafts"] > 2 * t["spec_decode_num_drafts"]  # n-gram matches copied input
    assert s["mean_tpot_ms"] < t["mean_tpot_ms"]
    # the filter is vLLM's: an exact match on the row's category, so every prompt is a summary task
    assert sum(s["input_lens"]) / 16 > 3 * sum(t["input_lens"]) / 16


def test_cuda_visible_devices_parsing_follows_cuda():
    sys.path.insert(0, str(REPO / "testbed" / "simvllm"))
    from testbed.seed import gpu_json
    from vllm.simenv import visible_gpus
    gpus = [dict(g) for g in gpu_json("w1", 4)["gpus"]]
    idx = lambda value: [g["index"] for g in visible_gpus(gpus, value)]  # noqa: E731
    assert idx(None) == [0, 1, 2, 3]                      # unset: every GPU
    assert idx("2,0") == [2, 0]                           # the order given (cuda:0 is GPU 2)
    assert idx(f"{gpus[3]['uuid']},{gpus[1]['uuid'][:12]}") == [3, 1]  # UUIDs, unique prefixes
    assert idx("1,9,2") == [1]                            # stops at the first unknown entry
    assert idx("1,1,2") == [1]                            # ... or at a repeat
    assert idx("") == [] and idx("-1") == []              # nothing visible
    assert idx("GPU-") == []                              # an ambiguous prefix names no GPU
