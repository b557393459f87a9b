"""The GPU fact's interface beyond parsing: the inventory override, what `fab facts` prints."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from specfleet.roles.host_facts import HostFacts
from specfleet.facts.gpus import GpuTopology, Gpus
from specfleet.inventory import InventoryError, load_inventory
from specfleet.tasks.facts import gpu_cell

HERE = Path(__file__).parent


def fixture_value(fact, name):
    case = json.loads((HERE / f"gpus.{type(fact).__name__}" / f"{name}.json").read_text())
    return fact.parse(case["output"], case["rc"])


def inventory(tmp_path, gpus: str):
    p = tmp_path / "hosts.yml"
    p.write_text(textwrap.dedent(f"""
        hosts:
          w1: {{address: 10.0.0.11, vars: {{gpus: {gpus}}}}}
          w2: {{address: 10.0.0.12}}
    """))
    return load_inventory(p)


def test_topology_of_an_hgx_node_is_all_nvlink():
    topo = fixture_value(GpuTopology(), "hgx-8x-h100")
    assert len(topo.links) == 8 * 7 // 2
    assert topo.kind(3, 7) == topo.kind(7, 3) == "NV18" and topo.kind(0, 5).startswith("NV")
    pcie = fixture_value(GpuTopology(), "pcie-4-gpus-2-numa")
    assert pcie.kind(0, 1) == "PHB" and pcie.kind(1, 2) == "SYS"
    assert pcie.kind(0, 9) is None


@pytest.mark.parametrize("gpus, field, says", [
    ("[{name: H200}]", "vars.gpus.0.memory_mib", "is required"),
    ("[{name: H200, memory_mib: '80 GB'}]", "vars.gpus.0.memory_mib", "valid integer"),
    ("[{name: H200, memory_mib: 0}]", "vars.gpus.0.memory_mib", "greater than 0"),
    ("[{name: H200, memory_mib: 1, uuid: 'GPU-1; reboot'}]", "vars.gpus.0.uuid", "one word"),
    ("[{name: H200, memory_mib: 1, index: 3}]", "vars.gpus.0.index", "unknown field"),
    ("[]", "vars.gpus", "at least 1"),
    ("H200", "vars.gpus", "valid list"),
])
def test_a_bad_gpus_var_names_file_host_and_field(tmp_path, gpus, field, says):
    with pytest.raises(InventoryError) as e:
        inventory(tmp_path, gpus)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'hosts.yml'}: host 'w1', field {field!r}") and says in msg, msg


def facts_values(gpus_case, topo_case):
    return {"os": "Ubuntu 24.04.1 LTS", "kernel": "6.8.0-51-generic", "hostname": "w1", "addresses": [],
            "routes": [], "gpus": fixture_value(Gpus(), gpus_case), "topology": fixture_value(GpuTopology(), topo_case)}


def test_fab_facts_prints_each_gpu_and_the_links():
    data = HostFacts().report(facts_values("hgx-8x-h200", "hgx-8x-h100"))
    cell = gpu_cell(json.loads(json.dumps(data)))  # what the event log holds is what is printed
    lines = cell.splitlines()
    assert lines[0] == "0: NVIDIA H200 143771 MiB, 0 used" and lines[2] == "2: NVIDIA H200 143771 MiB, 120034 used"
    assert lines[8].startswith("NV18: 0-1 0-2 ") and lines[8].endswith(" 6-7")


def test_fab_facts_says_why_no_gpu_is_visible_and_marks_an_override():
    data = HostFacts().report(facts_values("driver-not-loaded", "driver-not-loaded"))
    assert data["gpus"] == [] and data["topology"] is None
    assert gpu_cell(data).startswith("NOT VISIBLE: NVIDIA-SMI has failed because it couldn't communicate")
    data = HostFacts([{"name": "NVIDIA H200", "memory_mib": 143771}]).report(facts_values("driver-not-loaded", "one-gpu"))
    assert gpu_cell(data) == "0: NVIDIA H200 143771 MiB\n(from the inventory's gpus)"
    assert data["gpus_source"] == "inventory"
