"""`fab bench`'s GPU slots from the workers' facts: nvidia-smi's GPUs and topology in, NodeInfo out
(issue 15: a node's GPUs are slots; the inventory's `gpus` wins)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specfleet.campaign import NodeInfo, format_split, split
from specfleet.plan import PlanError
from specfleet.facts.gpus import Gpu, GpuLink, GpuList, GpuTopology, Gpus, Topology

FACTS = Path(__file__).resolve().parents[1] / "facts"


def fixture_value(fact, name):
    case = json.loads((FACTS / f"gpus.{type(fact).__name__}" / f"{name}.json").read_text())
    return fact.parse(case["output"], case["rc"])


def h200s(n: int) -> GpuList:
    return GpuList([Gpu(i, f"GPU-{i:08d}-aaaa-bbbb-cccc-000000000000", "NVIDIA H200", 143771) for i in range(n)])


def topo(n: int, kind) -> Topology:
    return Topology([GpuLink(a, b, kind(a, b)) for a in range(n) for b in range(a + 1, n)])


def test_eight_h200_all_nv18_are_eight_slots_in_one_nvlink_group():
    node = NodeInfo.from_facts("w1", {}, h200s(8), topo(8, lambda a, b: "NV18"))
    assert [g["index"] for g in node.gpus] == list(range(8)) and node.gpus[3]["uuid"].startswith("GPU-0000000")
    assert node.gpu_groups == (tuple(range(8)),)
    assert node.gpus_source == "nvidia-smi" and node.groups_source == "nvidia-smi topo"
    assert "8 GPUs (nvidia-smi), NVLink groups [0,1,2,3,4,5,6,7] (nvidia-smi topo)" in node.describe()


def test_the_real_hgx_topology_fixture_gives_one_group():
    node = NodeInfo.from_facts("w1", {}, fixture_value(Gpus(), "hgx-8x-h200"),
                               fixture_value(GpuTopology(), "hgx-8x-h100"))
    assert len(node.gpus) == 8 and node.gpu_groups == (tuple(range(8)),)


def test_two_nvlink_islands_of_four_are_two_groups():
    island = lambda a, b: "NV12" if a // 4 == b // 4 else "SYS"  # noqa: E731
    node = NodeInfo.from_facts("w1", {}, h200s(8), topo(8, island))
    assert node.gpu_groups == ((0, 1, 2, 3), (4, 5, 6, 7))


def test_a_gpu_without_nvlink_is_a_group_of_its_own():
    pair = lambda a, b: "NV4" if {a, b} == {0, 1} else "PHB"  # noqa: E731
    node = NodeInfo.from_facts("w1", {}, h200s(3), topo(3, pair))
    assert node.gpu_groups == ((0, 1), (2,))


@pytest.mark.parametrize("topology, says", [
    (lambda: topo(4, lambda a, b: "PIX" if a // 2 == b // 2 else "SYS"), "PCIe only"),
    (lambda: fixture_value(GpuTopology(), "pcie-4-gpus-2-numa"), "PCIe only"),
    (lambda: None, "no topology"),
])
def test_pcie_only_or_no_topology_means_no_group_constraint_and_says_so(topology, says):
    node = NodeInfo.from_facts("w1", {}, h200s(4), topology())
    assert len(node.gpus) == 4 and node.gpu_groups is None
    assert says in node.groups_source and "any set" in node.describe()


def test_the_inventory_gpus_win_over_nvidia_smi():
    inv = {"gpus": [{"name": "NVIDIA H200", "memory_mib": 143771}] * 2}
    node = NodeInfo.from_facts("w1", inv, h200s(8), topo(8, lambda a, b: "NV18"))
    assert [g["index"] for g in node.gpus] == [0, 1] and node.gpus_source == "inventory"
    assert node.gpu_groups is None and "no gpu_groups in the inventory" in node.groups_source
    # it wins even where nvidia-smi failed: the inventory says what the node has
    node = NodeInfo.from_facts("w1", inv, GpuList([], "NVIDIA-SMI has failed"), None)
    assert len(node.gpus) == 2 and node.gpus_source == "inventory"


def test_the_inventory_gpu_groups_win_over_the_topology():
    node = NodeInfo.from_facts("w1", {"gpu_groups": [[0, 1], [2, 3]]}, h200s(4), topo(4, lambda a, b: "NV18"))
    assert node.gpu_groups == ((0, 1), (2, 3)) and node.groups_source == "inventory"
    with pytest.raises(PlanError, match="w1.*gpu_groups names GPU"):
        NodeInfo.from_facts("w1", {"gpu_groups": [[0, 9]]}, h200s(4), None)


@pytest.mark.parametrize("found", [fixture_value(Gpus(), "driver-not-loaded"), fixture_value(Gpus(), "no-nvidia-smi"),
                                   GpuList([])])
def test_a_failed_nvidia_smi_is_one_line_naming_the_host(found):
    with pytest.raises(PlanError) as e:
        NodeInfo.from_facts("w7", {}, found, None)
    msg = str(e.value)
    assert "\n" not in msg and "'w7'" in msg and "nvidia-smi" in msg and "`gpus`" in msg


def test_the_split_schedules_over_the_discovered_slots_and_prints_the_source():
    from specfleet.campaign import load_plan
    plan = load_plan(Path(__file__).resolve().parents[2] / "plans" / "qwen3-32b.yml")
    four = [NodeInfo.from_facts(n, {}, h200s(4), topo(4, lambda a, b: "NV18")) for n in ("w1", "w2")]
    one = [NodeInfo.from_vars(n, {}) for n in ("w1", "w2")]
    s4, s1 = split(plan, four), split(plan, one)
    text = format_split(s4, four)
    assert "w1  4 GPUs (nvidia-smi), NVLink groups [0,1,2,3] (nvidia-smi topo)" in text
    assert s4.makespan_s <= s1.makespan_s
