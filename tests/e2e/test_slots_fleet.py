"""Issue 15 end to end: 2 workers x 4 GPUs, 6 single-GPU configurations and one TP=2 configuration,
`packing: shared`. Needs h-sim's `testbed.up(..., gpus=G)` (the nvidia-smi stand-in with G GPUs, the
simulated engine honouring CUDA_VISIBLE_DEVICES and --tensor-parallel-size); skipped until it exists.
Every assertion about a worker reads the worker itself (its state.json, nvidia-smi, result files).
"""
from __future__ import annotations

import inspect
import json
import time

import pytest

from pathlib import Path

import yaml

from e2e_helpers import fab, host_sh, inventory_of
from test_bench import bench, bench_in_background, out_of, plan_variant, state
from testbed.bed import Testbed

pytestmark = [pytest.mark.e2e, pytest.mark.skipif("gpus" not in inspect.signature(Testbed.up).parameters,
                                                   reason="needs the testbed's --gpus (h-sim, issue 15)")]

CAMPAIGN = "e2e-fast"
EXTRA = [f"ngram_k{k}" for k in (2, 3)]


def gpu_used(tb, host: str) -> dict[str, int]:
    out = host_sh(tb, host, "nvidia-smi --query-gpu=index,uuid,name,memory.used --format=csv,noheader,nounits")
    return {line.split(", ")[1]: int(line.split(", ")[-1]) for line in out.stdout.splitlines() if line.strip()}


def six_and_tp2(doc):
    doc["packing"] = "shared"
    doc["configurations"] += [{"name": n, "speculative_config": {"method": "ngram", "num_speculative_tokens": k}}
                              for n, k in zip(EXTRA, (2, 3))]
    doc["configurations"].append({"name": "tp2", "speculative_config": None,
                                  "extra_args": ["--tensor-parallel-size", "2"]})


def test_two_workers_of_four_gpus_run_servers_at_once_on_disjoint_gpus(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2, gpus=4)
    inv = inventory_of(tb)  # this test's own testbed inventory: the workers' GPUs written into it
    doc = yaml.safe_load(Path(inv).read_text())
    for name in ("w1", "w2"):
        doc["hosts"][name].setdefault("vars", {}).setdefault("gpus", [{"name": "NVIDIA H200", "memory_mib": 143771}] * 4)
    Path(inv).write_text(yaml.safe_dump(doc, sort_keys=False))
    assert fab("provision", inventory=inv, runs=tmp_path / "runs-p").returncode == 0
    plan = plan_variant(tmp_path, six_and_tp2)
    with bench_in_background(tb, tmp_path, plan=plan, tag="first") as p:
        overlap, victim = watch_and_kill(tb)
        p.wait(timeout=600)
    assert overlap and victim
    for host in ("w1", "w2"):
        st = state(tb, host)
        for i in st["items"]:
            assert i["status"] == ("failed" if (host, i["name"]) == victim else "done"), (host, i["error"])
        assert set(gpu_used(tb, host).values()) == {0}
        tp = [i for i in st["items"] if i["name"] == "tp2"]
        assert not tp or len(tp[0]["gpus"]) == 2
    # 2. resume redoes the killed item alone
    again = bench(tb, tmp_path, plan=plan, tag="resume")
    assert again.returncode == 0, out_of(again)
    st = state(tb, victim[0])
    assert {i["name"]: i["attempts"] for i in st["items"]}[victim[1]] == 2
    # 3. the report merges, states the packing and where each result ran
    res = tmp_path / "results"
    out = fab("collect", "--plan", str(plan), "--results", str(res), runs=tmp_path / "runs-c",
              inventory=inv)
    assert out.returncode == 0, out_of(out)
    md = next(res.rglob("report.md")).read_text()
    assert "Packing: shared" in md
    r = json.loads(next(f for f in (res / CAMPAIGN).rglob("tp2_conc1*.json") if not f.name.endswith(".record.json")).read_text())
    assert len(r["gpu_uuids"].split(",")) == 2


def watch_and_kill(tb):
    """Until two servers of one worker run at once (their GPU sets disjoint) and one non-baseline server
    has been killed (SIGKILL to its process group) while benchmarking: (overlap seen, (host, item))."""
    overlap, victim, deadline = False, None, time.monotonic() + 300
    while time.monotonic() < deadline and not (overlap and victim):
        for host in ("w1", "w2"):
            st = state(tb, host) or {}
            busy = [i for i in st.get("items", []) if i["status"] in ("loading", "benchmarking")]
            sets = [frozenset(g["uuid"] for g in i.get("gpus", [])) for i in busy]
            if len(busy) >= 2:
                overlap = True
                assert all(not (a & b) for k, a in enumerate(sets) for b in sets[k + 1:]), busy
            bench_now = [i for i in busy if i["status"] == "benchmarking" and i["name"] != "vanilla"]
            if bench_now and not victim:
                victim = (host, bench_now[0]["name"])
                host_sh(tb, host, f"kill -KILL -- -{bench_now[0]['server_pid']}")
        time.sleep(0.3)
    return overlap, victim


def test_every_gpu_runs_the_baseline_on_each_gpu_and_the_report_compares_them(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2, gpus=2)   # the GPUs from nvidia-smi: the inventory does not list them
    inv = inventory_of(tb)
    assert fab("provision", inventory=inv, runs=tmp_path / "runs-p").returncode == 0

    def every_gpu(doc):
        doc["packing"] = "shared"
        doc.setdefault("equivalence", {})["every_gpu"] = True
        doc["configurations"].append({"name": "ngram_k2", "speculative_config": {"method": "ngram",
                                                                                 "num_speculative_tokens": 2}})
    plan = plan_variant(tmp_path, every_gpu)
    first = bench(tb, tmp_path, plan=plan, tag="first", timeout=600)
    assert first.returncode == 0, out_of(first)
    for host in ("w1", "w2"):
        items = {i["name"]: i for i in state(tb, host)["items"]}
        assert [g["index"] for g in items["vanilla"]["gpus"]] == [0], items["vanilla"]
        assert [g["index"] for g in items["vanilla.gpu1"]["gpus"]] == [1], items["vanilla.gpu1"]
        assert all(i["status"] == "done" and i["attempts"] == 1 for i in items.values()), items
        assert set(gpu_used(tb, host).values()) == {0}
    # twice: the same plan resumes with nothing to do
    again = bench(tb, tmp_path, plan=plan, tag="again")
    assert again.returncode == 0, out_of(again)
    assert all(i["attempts"] == 1 for h in ("w1", "w2") for i in state(tb, h)["items"])
    res = tmp_path / "results"
    out = fab("collect", "--plan", str(plan), "--results", str(res), runs=tmp_path / "runs-c", inventory=inv)
    assert out.returncode == 0, out_of(out)
    md = (res / CAMPAIGN / "report.md").read_text()
    for host in ("w1", "w2"):   # the GPU check ran: the baseline's two GPUs compared, on each node
        assert f"across the GPUs of {host}: not checked" not in md
        assert md.count(f"{host} [GPU-") >= 2, md
    assert "vanilla.gpu1" not in (res / CAMPAIGN / "merged.csv").read_text(), "a GPU copy reached the tables"
    assert (res / CAMPAIGN / "w1" / "vanilla.gpu1_conc16.json").is_file()
