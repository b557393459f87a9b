"""`fab bench` reads each worker's GPUs from nvidia-smi (issue 15): a `--gpus 4` testbed whose
inventory names no `gpus` is scheduled over 4 slots per node, in the one probe batch per host."""
from __future__ import annotations

import inspect
import re

import pytest

from e2e_helpers import derived_inventory, events, fab, inventory_of
from test_bench import out_of, plan_variant
from testbed.bed import Testbed

pytestmark = [pytest.mark.e2e, pytest.mark.skipif("gpus" not in inspect.signature(Testbed.up).parameters,
                                                   reason="needs the testbed's --gpus (issue 15)")]


def shared_six(doc):
    doc["packing"] = "shared"
    doc["configurations"] += [{"name": f"ngram_k{k}", "speculative_config": {"method": "ngram",
                                                                            "num_speculative_tokens": k}}
                              for k in (2, 3, 4, 5)]


def makespan(out: str) -> float:
    return float(re.search(r"makespan ([0-9.]+) min", out).group(1))


def check(inv, plan, runs):
    p = fab("bench", "--check", "--hosts", "w1,w2", "--plan", str(plan), inventory=inv, runs=runs)
    return p, {e["host"]: e["count"] for e in events(runs) if e.get("event") == "commands"}


def test_the_split_schedules_over_the_gpus_nvidia_smi_lists(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2, gpus=4)
    inv = inventory_of(tb)
    assert "gpus:" not in inv.read_text().replace("gpu_", "")  # the inventory does not say
    plan = plan_variant(tmp_path, shared_six)
    p, commands = check(inv, plan, tmp_path / "runs-facts")
    assert p.returncode == 0, out_of(p)
    for w in ("w1", "w2"):
        assert re.search(rf"{w}\s+4 GPUs \(nvidia-smi\)", p.stdout), out_of(p)
    assert commands == {"w1": 1, "w2": 1}, commands  # GPUs and campaign state in one probe batch
    # the inventory's `gpus` wins: one GPU each, the same plan takes longer
    one = derived_inventory(tb, tmp_path, lambda d: [d["hosts"][w].setdefault("vars", {}).update(
        gpus=[{"name": "NVIDIA H200", "memory_mib": 143771}]) for w in ("w1", "w2")])
    q, _ = check(one, plan, tmp_path / "runs-inv")
    assert q.returncode == 0, out_of(q)
    assert re.search(r"w1\s+1 GPU \(inventory\)", q.stdout), out_of(q)
    assert makespan(p.stdout) < makespan(q.stdout)


def test_a_worker_whose_nvidia_smi_fails_fails_alone(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2, gpus=4)
    tb.fault("w2", "module-lost")  # the testbed's stand-in nvidia-smi fails as after a kernel upgrade
    p, _ = check(inventory_of(tb), plan_variant(tmp_path, shared_six), tmp_path / "runs")
    failed = [e for e in events(tmp_path / "runs") if e.get("event") == "step" and e["status"] == "failed"]
    assert p.returncode != 0
    assert re.search(r"w1\s+4 GPUs \(nvidia-smi\)", p.stdout), out_of(p)
    assert [e["host"] for e in failed] == ["w2"], failed
    why = failed[0]["message"]
    assert "\n" not in why and why.startswith("host 'w2': nvidia-smi: NVIDIA-SMI has failed") and "`gpus`" in why
    assert not re.search(r"w2\s+\d+ GPU", p.stdout), out_of(p)  # not in the split
