"""device.sh rehearsed here, with the simulated vLLM in the payload's place (REHEARSAL=1): the same
bash the device runs (manifest check, unpack, wrapper and env file, model directory, provenance
stamp, specfleet's runner under the phase watcher, orphan check, packing into at most 8 files).
Not rehearsed: the kernel self-test and everything CUDA. Writes /tmp/sfgpu, /tmp/sfwork,
/tmp/vllm-venv and /tmp/site as the device does; skipped when another process holds them."""
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from testbed.realgpu import payload, specs

REPO = Path(__file__).resolve().parents[2]
SIMVLLM = REPO / "testbed" / "simvllm" / "vllm"
SAMPLE = REPO / "datasets" / "sample" / "question.jsonl"
DEVICE_DIRS = [Path(p) for p in ("/tmp/sfgpu", "/tmp/sfwork", "/tmp/vllm-venv", "/tmp/site")]

pytestmark = pytest.mark.timeout(900)

FAKE_SMI = """#!/bin/sh
case "$*" in
  -L) printf 'GPU 0: REHEARSAL GPU (UUID: GPU-0)\\nGPU 1: REHEARSAL GPU (UUID: GPU-1)\\n' ;;
  *index,uuid,name,memory.used*) printf '0, GPU-0, REHEARSAL GPU, 0\\n1, GPU-1, REHEARSAL GPU, 0\\n' ;;  # the worker's GPU table
  *memory.used*) echo 0 ;;
  *name,driver_version,memory.total*) printf 'name, driver_version, memory.total [MiB]\\nREHEARSAL GPU, 0.0, 1 MiB\\n' ;;
  *) echo 'REHEARSAL GPU, 0.0' ;;
esac
"""


def _tok(tmp: Path) -> Path:
    """A tokenizer directory models.py `dummy` accepts (vocab read from tokenizer.json)."""
    tok = tmp / "smollm2-tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    return tok


@pytest.fixture
def carry(tmp_path):
    if any(p.exists() for p in DEVICE_DIRS):
        pytest.skip("a device layout (/tmp/sfgpu, /tmp/sfwork, ...) exists here already: not overwriting it")
    c = tmp_path / "root" / ".realgpu" / "carry"
    c.mkdir(parents=True)
    site = tmp_path / "site"
    shutil.copytree(SIMVLLM, site / "vllm")
    stage = tmp_path / "stage"
    stage.mkdir()
    payload.xz_tar(site, stage / payload.SITE_XZ)
    payload.xz_tar(_tok(tmp_path), c / "tok.tar.xz")
    payload.build_kit(c / "kit", SAMPLE)
    # the simulated engine names itself ("simvllm 1.0 (simulated vLLM)"); a rehearsal plan pins that
    # (the real plans pin 0.26.0)
    plan = yaml.safe_load((REPO / "testbed/realgpu/plans/h200-dummy8b.yml").read_text())
    plan.update(campaign="rehearsal", vllm_version="simvllm 1.0 (simulated vLLM)")
    plan["benchmark"].update(num_prompts=4, output_len=16)
    plan["server"].update(health_poll_s=0.5, health_timeout_s=60)
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "rehearsal.yml").write_text(yaml.safe_dump(plan))
    specs.make(plans, c / "kit" / "specs")
    gguf = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(os.urandom(3000))
    payload.split_file(gguf, c, payload.GGUF, 2)
    payload.split_file(stage / payload.SITE_XZ, c, payload.SITE, 2)   # as a grown checkout needs it
    (c / "payload.json").write_text("{}\n")
    payload.write_manifest(c)
    yield c
    for p in DEVICE_DIRS:
        shutil.rmtree(p, ignore_errors=True)


def _run(carry: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    fake = tmp / "fakebin"
    fake.mkdir(exist_ok=True)
    (fake / "nvidia-smi").write_text(FAKE_SMI)
    (fake / "nvidia-smi").chmod(0o755)
    torch = tmp / "faketorch" / "torch"
    torch.mkdir(parents=True, exist_ok=True)
    (torch / "__init__.py").write_text("__version__ = '0.0+rehearsal'\nclass version:\n    cuda = '0.0'\n")
    out = tmp / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "PYTHONPATH": str(tmp / "faketorch"),
           "OUT": str(out), "PY": sys.executable, "VLLM_MODULE": "vllm", "REHEARSAL": "1",
           "SIMVLLM_GPU_DIR": str(tmp / "simgpu"), "SIMVLLM_HOST_CONFIG": str(tmp / "nosim.json"),
           "SIMVLLM_TIME_SCALE": "0.001", "SIMVLLM_LOAD_SCALE": "0.001"}
    return subprocess.run(["bash", str(carry / "kit" / "device.sh"), *args], cwd=carry.parents[1], env=env,
                          capture_output=True, text=True, timeout=600)


def test_rehearsal_runs_the_campaign_and_packs_at_most_8_files(carry, tmp_path):
    p = _run(carry, tmp_path, "run", "rehearsal")
    out = tmp_path / "out"
    log = (out / "device.log").read_text()
    assert p.returncode == 0, log[-3000:]
    files = sorted(f.name for f in out.iterdir())
    assert len(files) <= 8 and {"device.log", "env.txt", "selftest.txt", "payload.json", "results.tar.gz",
                                "summary.txt", "phases.json"} <= set(files), files
    assert "verified" in log and "REHEARSAL: kernel self-test not run" in log
    # read as the runner reads it (host.ENGINE_VERSION_PY: the identity the engine ships)
    assert 'engine version: {"name": "specfleet-simvllm", "version": "simvllm 1.0 (simulated vLLM)", "simulated": true}' in log
    with tarfile.open(out / "results.tar.gz") as t:
        t.extractall(tmp_path / "res")  # our own archive
    run = tmp_path / "res" / "rehearsal" / "h200"
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "done" and [i["status"] for i in state["items"]] == ["done", "done"], state
    assert state["vllm_version"] == "simvllm 1.0 (simulated vLLM)"
    # the prompt-length check ran with <venv>/bin/python (device.sh's wrapper) and the fit check from runner.pyz
    assert all(i["prompt_fit"]["kept"] == 4 and not i["prompt_fit"]["too_long"] for i in state["items"])
    r = json.loads((run / "vanilla_conc1.json").read_text())
    assert r["gpu"] == "REHEARSAL GPU" and r["driver"] == "0.0" and r["torch_version"] == "0.0+rehearsal"
    assert r["engine"] == "specfleet-simvllm"   # the simulated engine's own mark wins: its report says SIMULATED
    stamped = json.loads(Path("/tmp/sfgpu/specs/rehearsal.json").read_text())
    assert ["engine", specs.ENGINE] in stamped["items"][0]["client"]["metadata"]
    summary = (out / "summary.txt").read_text()
    assert "campaign rehearsal status done" in summary and "runner cost" in summary
    phases = json.loads((out / "phases.json").read_text())
    # (the watcher may see the runner's first state, all items pending, before the first item starts)
    assert [e["status"] for e in next(iter(phases.values()))
            if e["item"] == "vanilla" and e["status"] != "pending"][:3] == ["preflight", "loading", "benchmarking"]


def test_a_damaged_payload_stops_before_anything_runs(carry, tmp_path):
    with open(carry / "kit" / "question.jsonl", "a") as f:
        f.write("\n")
    p = _run(carry, tmp_path, "run", "rehearsal")
    assert p.returncode == 2
    log = (tmp_path / "out" / "device.log").read_text()
    assert "checksum mismatch" in log and "campaign" not in log.split("checksum mismatch")[1]
    assert not Path("/tmp/sfwork").exists()


def _only(carry: Path, keep: list[str]) -> None:
    """What one call carries: remove every top-level entry of the carry folder not in `keep`, and the
    parts (site/part-N, gguf/part-N) not named."""
    for p in list(carry.iterdir()):
        if p.name not in keep and p.name not in (payload.SITE, payload.GGUF):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    for p in [*(carry / payload.SITE).iterdir(), *(carry / payload.GGUF).iterdir()]:
        if f"{p.parent.name}/{p.name}" not in keep:
            p.unlink()


def _call(carry: Path, full: Path, paths: list[str]) -> None:
    """The device's copy of the carry folder for one call: exactly `paths` of the built folder."""
    shutil.rmtree(carry)
    shutil.copytree(full, carry)
    _only(carry, paths)


def _parts_dir(carry_full: Path, name: str) -> Path:
    return Path("/tmp/sfgpu/parts") / (carry_full / "kit" / f"{name}.sha256").read_text().split()[0]


def test_the_planned_calls_bring_the_site_in_parts_and_the_gguf_after(carry, tmp_path):
    """payload.plan_calls in order on one warm machine (/tmp kept): the first site part alone (`stash`:
    kept, nothing run), the last with the tokenizer (joined, checked against kit/site.sha256, unpacked,
    campaign run), then one GGUF part per call (stashed, joined, checked)."""
    full = tmp_path / "full"
    shutil.copytree(carry, full)
    calls = payload.plan_calls(full)
    assert [c["name"] for c in calls] == ["site 1/2", "site 2/2 + tokenizer", "GGUF 1/2", "GGUF 2/2"]
    assert calls[0]["command"].endswith("device.sh stash") and calls[1]["command"].endswith("device.sh prepare")
    _call(carry, full, calls[0]["paths"])
    p = _run(carry, tmp_path, "stash")
    log = (tmp_path / "out" / "device.log").read_text()
    assert p.returncode == 0, log[-3000:]
    assert "stashed site/part-0" in log and "site: 1 of 2 part(s) on this machine" in log
    assert not Path("/tmp/site").exists() and not Path("/tmp/sfwork").exists()   # nothing unpacked, nothing run
    _call(carry, full, calls[1]["paths"])
    p = _run(carry, tmp_path, "run", "rehearsal")
    log = (tmp_path / "out" / "device.log").read_text()
    assert p.returncode == 0, log[-3000:]
    assert "site.tar.xz joined from its parts: sha256 matches kit/site.sha256" in log
    assert json.loads(Path("/tmp/sfwork/rehearsal/h200/state.json").read_text())["status"] == "done"
    for i, call in enumerate(calls[2:]):
        _call(carry, full, call["paths"])
        assert not (carry / "tok.tar.xz").exists() and not (carry / payload.SITE).joinpath("part-1").exists()
        p = _run(carry, tmp_path, "run", "h200-smollm2")
        log = (tmp_path / "out" / "device.log").read_text()
        assert p.returncode == 0, log[-3000:]
        assert f"stashed gguf/part-{i}" in log and "site already in /tmp/site" in log
        assert "skip h200-smollm2: its model is not on this machine" in log   # rehearsal: not converted
    assert "REHEARSAL: GGUF assembled, not converted" in log
    assert Path("/tmp/sfgpu/SmolLM2-135M-Instruct.Q4_1.gguf").read_bytes() == (
        tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").read_bytes()


def test_a_site_part_not_kept_from_an_earlier_call_is_refused_in_one_line(carry, tmp_path):
    """The last site call on a fresh machine (the first part's call went to another one): exit 2 naming
    the part, before anything is unpacked or run."""
    full = tmp_path / "full"
    shutil.copytree(carry, full)
    _call(carry, full, payload.plan_calls(full)[1]["paths"])
    p = _run(carry, tmp_path, "prepare")
    assert p.returncode == 2
    errors = [ln for ln in (tmp_path / "out" / "device.log").read_text().splitlines() if "ERROR" in ln]
    assert len(errors) == 1 and "site.tar.xz: site/part-0 neither carried by this call nor kept on this machine" in errors[0]
    assert not Path("/tmp/site").exists() and not Path("/tmp/sfwork").exists()


def test_a_damaged_kept_site_part_is_refused_by_the_joined_digest(carry, tmp_path):
    full = tmp_path / "full"
    shutil.copytree(carry, full)
    calls = payload.plan_calls(full)
    _call(carry, full, calls[0]["paths"])
    assert _run(carry, tmp_path, "stash").returncode == 0
    kept = _parts_dir(full, payload.SITE) / "part-0"
    data = bytearray(kept.read_bytes())
    data[100] ^= 1
    kept.write_bytes(bytes(data))
    _call(carry, full, calls[1]["paths"])
    p = _run(carry, tmp_path, "prepare")
    assert p.returncode == 2
    errors = [ln for ln in (tmp_path / "out" / "device.log").read_text().splitlines() if "ERROR" in ln]
    assert len(errors) == 1, errors
    assert "site.tar.xz joined from the parts in" in errors[0] and "kit/site.sha256 says" in errors[0]
    assert not Path("/tmp/site").exists()


def test_a_later_call_on_a_fresh_machine_stops_for_want_of_the_site(carry, tmp_path):
    _only(carry, payload.call_paths("gguf/part-0"))
    p = _run(carry, tmp_path, "run", "rehearsal")
    assert p.returncode == 2
    assert "site.tar.xz: site/part-0 site/part-1 neither carried by this call nor kept on this machine" in (
        tmp_path / "out" / "device.log").read_text()


def test_pair_runs_one_runner_per_gpu_at_once_with_multicast_off(carry, tmp_path):
    """Issue 17's device mode, rehearsed: the two-GPU plan split by specfleet's split (vanilla on
    both), each runner on its own GPU index, port and env file (CUDA_VISIBLE_DEVICES, multicast off)."""
    from specfleet.campaign import Paths, load_plan
    plan = yaml.safe_load((REPO / "testbed/realgpu/plans/h200x2-dummy8b.yml").read_text())
    plan.update(campaign="rehearsal-x2", vllm_version="simvllm 1.0 (simulated vLLM)")
    plan["benchmark"].update(num_prompts=4, output_len=16, repeat=1, steady_state="report-setup")
    plan["server"].update(health_poll_s=0.5, health_timeout_s=60)
    plan["configurations"] = [c for c in plan["configurations"] if c["name"] != "eagle3"]
    f = tmp_path / "rehearsal-x2.yml"
    f.write_text(yaml.safe_dump(plan))
    paths = Paths(venv=specs.VENV, work_dir=specs.WORK_DIR, dataset=specs.DATASET)
    specs.make_two_gpu(load_plan(str(f)), paths, carry / "kit" / "specs")
    payload.write_manifest(carry)
    # the simulated engine's host has two GPUs (its CUDA_VISIBLE_DEVICES=1 must name one that exists)
    (tmp_path / "simgpu").mkdir(exist_ok=True)
    (tmp_path / "simgpu" / "gpu.json").write_text(json.dumps({"gpus": [{"index": 0}, {"index": 1}]}))
    p = _run(carry, tmp_path, "pair", "rehearsal-x2")
    out = tmp_path / "out"
    log = (out / "device.log").read_text()
    assert p.returncode == 0, log[-3000:]
    assert len(list(out.iterdir())) <= 8 and not list(out.glob("phases-*.json"))
    for i, node in enumerate(specs.GPU_NODES):
        env = Path(f"/tmp/sfgpu/vllm-gpu{i}.env").read_text().splitlines()
        assert f"CUDA_VISIBLE_DEVICES={i}" in env
        assert {"NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1"} <= set(env)
        assert Path(f"/tmp/sfwork/gpu{i}/rehearsal-x2/{node}/state.json").is_file(), log[-4000:]
        st = json.loads(Path(f"/tmp/sfwork/gpu{i}/rehearsal-x2/{node}/state.json").read_text())
        assert st["status"] == "done" and st["items"][0]["name"] == "vanilla", (st, log[-3000:])
        spec = json.loads(Path(f"/tmp/sfgpu/specs/rehearsal-x2.{node}.json").read_text())
        assert spec["gpu_index"] == i and spec["port"] == 8000 + i
    names = [{it["name"] for it in json.loads(Path(f"/tmp/sfwork/gpu{i}/rehearsal-x2/{n}/state.json").read_text())[
        "items"]} for i, n in enumerate(specs.GPU_NODES)]
    assert names[0] & names[1] == {"vanilla"} and names[0] | names[1] == {"vanilla", "ngram", "ngram_improved"}
    phases = json.loads((out / "phases.json").read_text())
    assert {k.split("/")[-2] for k in phases if "rehearsal-x2" in k} == set(specs.GPU_NODES)
