"""fleet.sh's inventory for one node of a lent GPU machine (testbed/realgpu/fleetinv.py): the template's
one worker renamed to the node given (w1 on one machine, w2 on the next), no bandwidth fixed anywhere."""
from pathlib import Path

import pytest
import yaml

from testbed.realgpu import fleetinv

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = yaml.safe_load((REPO / "testbed/realgpu/fleet/inventory.yml").read_text())


@pytest.mark.parametrize("node", ["w1", "w2"])
def test_the_template_becomes_the_named_node_and_names_no_bandwidth(node):
    inv = fleetinv.node_inventory(TEMPLATE, node, "/tmp/sfctl/repo/datasets")
    assert list(inv["hosts"]) == [node] and inv["hosts"][node] == {"address": "127.0.0.1"}
    assert inv["groups"]["workers"]["hosts"] == [node]
    assert "gpu_memory_bandwidth_gbps" not in yaml.safe_dump(inv)
    assert inv["bastion"]["vars"]["datasets"] == ["/tmp/sfctl/repo/datasets/sample/question.jsonl"]


def test_a_bad_node_name_or_a_fixed_bandwidth_is_refused_naming_the_field():
    with pytest.raises(fleetinv.InventoryError, match="node 'w1; rm -rf /'"):
        fleetinv.node_inventory(TEMPLATE, "w1; rm -rf /")
    fixed = yaml.safe_load(yaml.safe_dump(TEMPLATE))
    fixed["all"]["vars"]["gpu_memory_bandwidth_gbps"] = 4800
    with pytest.raises(fleetinv.InventoryError, match=r"^all.vars.gpu_memory_bandwidth_gbps: .*H100 or an H200"):
        fleetinv.node_inventory(fixed, "w1")


def test_the_campaign_comes_from_the_plan(tmp_path):
    assert fleetinv.campaign_of(REPO / "plans/gpu-nodes-dummy8b.yml") == "gpu-nodes-dummy8b"
    (tmp_path / "p.yml").write_text("campaign: '../x'\n")
    with pytest.raises(fleetinv.InventoryError, match="campaign"):
        fleetinv.campaign_of(tmp_path / "p.yml")
