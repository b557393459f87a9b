"""The product path of the device (fleet.sh) rehearsed here with the simulated vLLM, as the documented
two-machine procedure runs it (docs/engines-gpu.md "Two lent machines as two nodes"): on the first
"machine" `device.sh stash` keeps the first part of the site archive, `device.sh prepare` (the second part with the
tokenizer: payload.plan_calls) joins and checks it and makes the provided venv and the model directories,
`fleet.sh up w1` starts a real sshd on loopback and runs `fab facts`, `fab provision` (twice) and `fab bench --no-wait`, `fleet.sh
finish w1` runs `fab bench` again (it reattaches), `fab collect` and `fab report`; the machine is then
"given back" (every device folder removed), and the next one runs `stash`, `prepare` and `FOLLOW=1 fleet.sh up w2`
(bench followed to the end and collect, in one call); `fab report` on one folder holding both campaigns'
results gives one merged report, gated between w1 and w2. Real sshd, rsync and Fabric; the controller is
this machine's .venv python (no wheels), the tools this machine's own unless FLEET_DEBS names the Debian
packages fleetkit.py downloaded (then they are unpacked and used as on the device).
Writes /tmp/sfgpu, /tmp/vllm-venv, /tmp/site, /tmp/sfssh, /tmp/sfctl as the device does; skipped when
they exist, or without sshd, or when not root (sshd logs in as root by key, on 127.0.0.1 only)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from testbed import seed
from testbed.realgpu import fleetkit, payload

REPO = Path(__file__).resolve().parents[2]
SIMVLLM = REPO / "testbed" / "simvllm" / "vllm"
SAMPLE = REPO / "datasets" / "sample" / "question.jsonl"
DIRS = [Path(p) for p in ("/tmp/sfgpu", "/tmp/vllm-venv", "/tmp/site", "/tmp/sfssh", "/tmp/sfctl")]
SIM = "simvllm 1.0 (simulated vLLM)"

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists(),
                                 reason="needs root and /usr/sbin/sshd (a root sshd on 127.0.0.1)")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def device(tmp_path):
    if any(p.exists() for p in DIRS):
        pytest.skip("a device layout (/tmp/sfgpu, /tmp/sfssh, ...) exists here already: not overwriting it")
    root = tmp_path / "root"
    c = root / ".realgpu" / "carry"
    c.mkdir(parents=True)
    site = tmp_path / "site"
    shutil.copytree(SIMVLLM, site / "vllm")
    (site / "torch").mkdir()   # the provided venv imports torch (venv_verify_packages) in an SSH session
    (site / "torch" / "__init__.py").write_text("__version__ = '0.0+rehearsal'\nclass version:\n    cuda = '0.0'\n")
    stage = tmp_path / "stage"
    stage.mkdir()
    payload.xz_tar(site, stage / payload.SITE_XZ)
    tok = tmp_path / "smollm2-tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    payload.xz_tar(tok, c / "tok.tar.xz")
    payload.build_kit(c / "kit", SAMPLE)
    # two parts, as beside a grown checkout: each machine gets them in two calls (payload.plan_calls)
    payload.split_file(stage / payload.SITE_XZ, c, payload.SITE, 2)
    (c / "payload.json").write_text("{}\n")
    payload.write_manifest(c)
    fleet = root / ".realgpu" / "fleet"
    fleet.mkdir()
    if os.environ.get("FLEET_DEBS"):
        shutil.copytree(os.environ["FLEET_DEBS"], fleet / "debs")
    fleetkit.snapshot(fleet / "snapshot.tar.gz")
    shutil.copy2(REPO / "testbed" / "realgpu" / "fleet.sh", fleet / "fleet.sh")
    payload.write_manifest(fleet)
    # the rehearsal's plan and inventory: the simulated engine, small, this machine's python version
    plan = yaml.safe_load((REPO / "plans" / "gpu-nodes-dummy8b.yml").read_text())
    plan.update(campaign="fleet-rehearsal", vllm_version=SIM)
    assert plan["benchmark"]["dataset_path"] == {"on_worker": "/tmp/sfgpu/question.jsonl"}  # device.sh prepare's copy
    plan["benchmark"].update(num_prompts=5, output_len=16, repeat=3, concurrencies=[1, 4],
                             sweep=[{"concurrency": 1}, {"concurrency": 4, "num_prompts": 20}])
    plan["equivalence"]["concurrency"] = 4
    plan["server"].update(health_poll_s=0.5, health_timeout_s=60)
    (tmp_path / "plan.yml").write_text(yaml.safe_dump(plan))
    port = _free_port()
    inv = yaml.safe_load((REPO / "testbed" / "realgpu" / "fleet" / "inventory.yml").read_text())
    inv["all"]["port"] = port
    v = inv["all"]["vars"]
    v["venv_python_version"] = "%d.%d" % sys.version_info[:2]
    v["skip_roles"] = [*v["skip_roles"], "nvidia"]   # never this machine's modules-load.d
    v["extra_env"].update(SIMVLLM_GPU_DIR=str(tmp_path / "simgpu"), SIMVLLM_HOST_CONFIG=str(tmp_path / "nosim.json"),
                          SIMVLLM_TIME_SCALE="0.001", SIMVLLM_LOAD_SCALE="0.001")
    inv["bastion"]["vars"]["datasets"] = [str(SAMPLE)]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inv))
    machine(tmp_path, "w1")
    env = {**os.environ, "PATH": f"/tmp/sfssh/bin:{os.environ['PATH']}", "PY": sys.executable,
           "VLLM_MODULE": "vllm", "REHEARSAL": "1", "PORT": str(port), "INVENTORY": str(tmp_path / "inventory.yml"),
           "PLAN": str(tmp_path / "plan.yml"), "LIMIT": "300"}
    yield root, env, tmp_path
    give_back()


def machine(tmp_path: Path, name: str) -> None:
    """A fresh lent machine: the testbed's nvidia-smi stand-in (one GPU of its own UUID, "loaded") on the
    SSH session's PATH (fleet.sh's SetEnv)."""
    gpu = tmp_path / f"simgpu-{name}"
    gpu.mkdir()
    (gpu / "gpu.json").write_text(json.dumps(seed.gpu_json(name, 1)))
    (gpu / "modules").write_text("nvidia\nnvidia_uvm\nnvidia_modeset\n")
    standin = tmp_path / "standin"
    standin.mkdir(exist_ok=True)
    if not (standin / "nvidia-smi").exists():
        (standin / "nvidia-smi").symlink_to(REPO / "testbed" / "host" / "gpu-standin")
    Path("/tmp/sfssh/bin").mkdir(parents=True)
    Path("/tmp/sfssh/bin/nvidia-smi").write_text(f"#!/bin/sh\nSIMVLLM_GPU_DIR={gpu} exec /usr/bin/python3 -IS {standin}/nvidia-smi \"$@\"\n")
    Path("/tmp/sfssh/bin/nvidia-smi").chmod(0o755)


def give_back() -> None:
    """The machine goes back: its sshd and sampler end (by their PID files) and every device folder goes."""
    for pidfile in (Path("/tmp/sfssh/sshd.pid"), Path("/tmp/sfctl/sampler.pid")):
        if pidfile.is_file():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
    for p in DIRS:
        shutil.rmtree(p, ignore_errors=True)


def _run(root: Path, env: dict, out: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    out.mkdir(exist_ok=True)
    return subprocess.run(["bash", script, *args], cwd=root, env={**env, "OUT": str(out)},
                          capture_output=True, text=True, timeout=800)


def _events(tar: Path, dest: Path) -> dict[str, list[dict]]:
    with tarfile.open(tar) as t:
        t.extractall(dest)  # our own archive
    out: dict[str, list[dict]] = {}
    for f in sorted((dest / "runs").rglob("*.jsonl")):
        recs = [json.loads(ln) for ln in f.read_text().splitlines() if ln.strip()]
        out.setdefault(recs[0].get("task", f.stem), []).append(recs)
    return out


def _results(tar: Path, dest: Path) -> None:
    with tarfile.open(tar) as t:
        t.extractall(dest)  # our own archive


def _prepare(root: Path, env: dict, tmp: Path, tag: str) -> None:
    """The planned first calls on a fresh machine: the first site part alone (`stash`), the second with
    the tokenizer (`prepare`: joined, checked, unpacked). The carry folder of each call holds exactly its
    paths (as the device tool sends them); the built one is kept aside."""
    carry = root / ".realgpu" / "carry"
    full = tmp / "carry-built"
    if not full.exists():
        shutil.copytree(carry, full)
    calls = payload.plan_calls(full)
    assert [c["command"].split()[-1] for c in calls] == ["stash", "prepare"], calls
    for i, call in enumerate(calls):
        shutil.rmtree(carry)
        carry.mkdir()
        for rel in call["paths"]:
            (carry / rel).parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if (full / rel).is_dir() else shutil.copy2)(full / rel, carry / rel)
        out = tmp / f"out-{tag}-{i}"
        p = _run(root, env, out, ".realgpu/carry/kit/device.sh", call["command"].split()[-1])
        log = (out / "device.log").read_text()
        assert p.returncode == 0, log[-3000:]
    assert "site.tar.xz joined from its parts: sha256 matches kit/site.sha256" in log, log[-3000:]


def test_two_machines_as_two_nodes_end_in_one_merged_gated_report(device):
    root, env, tmp = device
    # the first machine: node w1, in two calls (up: bench --no-wait; finish: bench reattached, collect, report)
    _prepare(root, env, tmp, "w1")
    p = _run(root, env, tmp / "out1", ".realgpu/fleet/fleet.sh", "up", "w1")
    log1 = (tmp / "out1" / "fleet.log").read_text()
    assert p.returncode == 0, log1[-4000:]
    for cmd in ("facts", "provision", "bench"):
        assert f"fab {cmd} exit 0" in log1, log1[-4000:]
    assert all(f"role {r} (inventory skip_roles)" in log1 for r in ("nfs", "network", "model"))
    assert "venv_source: provided: nothing built here" in log1
    assert "node w1, plan" in log1 and "(campaign fleet-rehearsal)" in log1
    p = _run(root, env, tmp / "out2", ".realgpu/fleet/fleet.sh", "finish", "w1")
    log2 = (tmp / "out2" / "fleet.log").read_text()
    assert p.returncode == 0 and "fab collect exit 0" in log2 and "fab report exit 0" in log2, log2[-4000:]
    # collect plans with the queues fab bench placed (planned.json in the results folder), not a split of its own
    assert "come from the split over the inventory" not in log2, log2[-4000:]
    assert "--gpu-bandwidth-gbps" not in log2   # nothing names a bandwidth: the report looks it up
    assert len(list((tmp / "out2").iterdir())) <= 8 and (tmp / "out2" / "state.json").is_file()
    ev = _events(tmp / "out2" / "runs.tar.gz", tmp / "ev")
    # the event logs end with the exit code; the second provision changed nothing
    ends = {task: [r[-1] for r in runs] for task, runs in ev.items()}
    assert all(e.get("exit_code") == 0 for runs in ends.values() for e in runs), ends
    # bench's log names the GPUs it split on, as nvidia-smi named them over SSH
    read = [r for runs in ev["bench"] for r in runs if r.get("step") == "read GPUs and campaign state"]
    assert read and all(r["data"]["gpu_names"] == [f"0: {seed.GPU['name']} {seed.GPU['memory_total_mib']} MiB"]
                        for r in read), read
    _results(tmp / "out2" / "results.tar.gz", tmp / "res")
    camp = tmp / "res" / "results" / "fleet-rehearsal"
    prov = json.loads((camp / "w1" / "provenance.json").read_text())
    # read by collect's own probe over SSH: the provided venv's python and package digest, the dataset hash
    assert prov["python"] == "%d.%d.%d" % sys.version_info[:3], prov
    assert prov["venv_digest"].startswith("dists-sha256:") and prov["dataset_sha256"], prov
    assert prov["gpu_name"] == seed.GPU["name"]
    assert (camp / "report.md").is_file() and (camp / "merged.csv").is_file()
    # telemetry: the runner sampled nvidia-smi and /metrics during every run, and collect fetched it
    results = sorted(f for f in camp.glob("w1/*_conc*_r*.json") if not f.name.endswith(".record.json"))
    assert results and all(f.with_suffix(".telemetry.jsonl").is_file() for f in results), sorted(camp.glob("w1/*"))
    assert "Telemetry per run" in (camp / "report.md").read_text()
    # the prompts: the file on the worker (on_worker), which device.sh prepare put there
    assert all(json.loads(f.read_text()).get("node") == "w1" for f in results)

    # given back; the next machine is node w2, in one call (FOLLOW=1: bench followed to the end, collect)
    give_back()
    machine(tmp, "w2")
    _prepare(root, env, tmp, "w2")
    p = _run(root, {**env, "FOLLOW": "1"}, tmp / "out4", ".realgpu/fleet/fleet.sh", "up", "w2")
    log4 = (tmp / "out4" / "fleet.log").read_text()
    assert p.returncode == 0 and "fab collect exit 0" in log4 and "node w2, plan" in log4, log4[-4000:]
    assert "w1" not in (tmp / "out4" / "fleet.log").read_text().split("node w2, plan", 1)[1].split("fab collect", 1)[0]
    _results(tmp / "out4" / "results.tar.gz", tmp / "res")   # beside w1's: one campaign folder holds both
    assert sorted(d.name for d in camp.iterdir() if d.is_dir() and (d / "run.json").is_file()) == ["w1", "w2"]

    # fab report on the folder holding both: one merged report, gated between the two nodes
    rep = subprocess.run([sys.executable, "-m", "fabric", "report", "--plan", str(tmp / "plan.yml"),
                          "--results", str(tmp / "res" / "results")], cwd=REPO, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert rep.returncode == 0, rep.stdout[-3000:] + rep.stderr[-3000:]
    merged = json.loads((camp / "merged.json").read_text())
    assert {r["node"] for r in merged if r["config"] == "vanilla"} == {"w1", "w2"}, merged[:2]
    md = (camp / "report.md").read_text()
    gate = md.split("## Node equivalence", 1)[1].split("\n## ", 1)[0]
    assert "w1" in gate and "w2" in gate, gate
    assert "## Gate decision" in md, md[:3000]
