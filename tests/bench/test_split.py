"""Splitting configurations across nodes."""
import random

import pytest

from specfleet.plan import PlanError, load_plan, parse_plan
from specfleet.campaign.split import REPORT_DURATIONS, NodeInfo, parse_pins, split

REPORT = load_plan("plans/qwen3-32b.yml")


def test_baseline_first_on_every_node_each_config_once():
    nodes = [NodeInfo(f"w{i}") for i in range(1, 4)]
    s = split(REPORT, nodes)
    assert all(q[0] == "vanilla" for q in s.queues.values())
    others = sorted(c for q in s.queues.values() for c in q[1:])
    assert others == ["eagle3", "ngram", "ngram_improved"]
    assert s.makespan_s >= s.lower_bound_s


def test_pins_honoured():
    nodes = [NodeInfo("w1", "local"), NodeInfo("w2", "nfs")]
    s = split(REPORT, nodes, pins=parse_pins(["eagle3=w2", "ngram=w2"]))
    assert "eagle3" in s.queues["w2"] and "ngram" in s.queues["w2"]


def test_bad_pins():
    nodes = [NodeInfo("w1"), NodeInfo("w2")]
    with pytest.raises(PlanError, match="no configuration 'eagle4'"):
        split(REPORT, nodes, pins={"eagle4": "w1"})
    with pytest.raises(PlanError, match="'w9' is not a selected node"):
        split(REPORT, nodes, pins={"eagle3": "w9"})
    with pytest.raises(PlanError, match="expected CONFIG=NODE"):
        parse_pins("eagle3")


def test_reproduces_report_split():
    """Report §5.1: n-gram family on worker-1, eagle3 on worker-2 (its draft was local there);
    worker-1 had the local model copy, worker-2 read from NFS."""
    nodes = [NodeInfo("w1", "local"), NodeInfo("w2", "nfs")]
    s = split(REPORT, nodes, pins=parse_pins("eagle3=w2"), durations=REPORT_DURATIONS)
    assert s.queues == {"w1": ["vanilla", "ngram", "ngram_improved"], "w2": ["vanilla", "eagle3"]}
    assert s.method == "exact"


def test_local_copy_is_faster_to_load():
    fast = split(REPORT, [NodeInfo("a", "local")]).makespan_s
    slow = split(REPORT, [NodeInfo("a", "nfs")]).makespan_s
    assert slow - fast > 4 * 500  # four loads of ~61 GiB, ~10 min each over NFS


def test_fresh_server_policy_costs_a_load_per_concurrency():
    raw = REPORT.model_dump(mode="json")
    raw["server"]["prefix_cache"] = "fresh-server-per-concurrency"
    fresh = parse_plan(raw)
    n = [NodeInfo("a", "nfs")]
    assert split(fresh, n).makespan_s - split(REPORT, n).makespan_s > 4 * 500


def test_quality_on_random_campaigns():
    rng = random.Random(7)
    raw = REPORT.model_dump(mode="json")
    worst = 0.0
    for trial in range(20):
        cfgs = [{"name": "vanilla", "speculative_config": None}]
        for i in range(rng.randint(6, 14)):
            cfgs.append({"name": f"c{i}", "speculative_config": None,
                         "load_estimate_s": rng.uniform(60, 900)})
        plan = parse_plan({**raw, "configurations": cfgs})
        nodes = [NodeInfo(f"w{i}", rng.choice(["local", "nfs"])) for i in range(rng.choice([2, 3]))]
        s = split(plan, nodes)
        worst = max(worst, s.ratio)
        assert all(q[0] == "vanilla" for q in s.queues.values())
    assert worst <= 1.10


def test_node_info_from_inventory_vars():
    n = NodeInfo.from_vars("w1", {"model_source": "local"})
    assert n.bandwidth_mb_s == 2000.0
    assert NodeInfo.from_vars("w2", {"model_read_mb_s": "250"}).bandwidth_mb_s == 250.0
    with pytest.raises(PlanError, match="model_source"):
        NodeInfo.from_vars("w3", {"model_source": "s3"}).bandwidth_mb_s
