"""GPU slots, pure parts: what a configuration needs, which GPUs it gets, the split over slots."""
import pytest

from specfleet.campaign.commands import Paths
from specfleet.plan import PlanError, gpus_needed, load_plan, parse_plan
from specfleet.campaign.schedule.slotsplit import polish
from specfleet.campaign.schedule.gpusets import parse_gpus, parse_groups, simulate
from specfleet.worker.runspec import Gpu
from specfleet.worker.slots import check_gpus, pick
from specfleet.campaign.spec import build_run_spec
from specfleet.campaign.schedule.split import NodeInfo, split

REPORT = "plans/qwen3-32b.yml"


def plan(extra_cfgs=(), **top):
    raw = load_plan(REPORT).model_dump(mode="json")
    raw["configurations"] += list(extra_cfgs)
    raw.update(top)
    return parse_plan(raw, "p.yml")


def ngram(name, k=3, **kw):
    return {"name": name, "speculative_config": {"method": "ngram", "num_speculative_tokens": k}, **kw}


def needed(extra_args=(), **fields) -> int:
    """GPUs of one server of a configuration with these extra_args and engine fields."""
    return gpus_needed(plan([ngram("x", extra_args=list(extra_args), **fields)]), "x")


def test_needed_is_tensor_times_pipeline_times_data_parallel_last_flag_wins():
    assert needed() == 1
    assert needed(["--tensor-parallel-size", "2"]) == 2
    assert needed(["-tp=4", "--pipeline-parallel-size", "2"]) == 8
    assert needed(["--tensor-parallel-size", "2", "--tensor-parallel-size=4", "-dp", "2"]) == 8
    assert needed(tensor_parallel_size=2, data_parallel_size=2) == 4
    with pytest.raises(PlanError, match="field 'extra_args': --tensor-parallel-size: '0' is not a positive integer"):
        needed(["--tensor-parallel-size", "0"])


def test_plan_refuses_a_bad_parallel_size_naming_configuration_and_field():
    with pytest.raises(PlanError, match=r"p.yml: configuration 'tp', field 'extra_args': --tensor-parallel-size: "
                                        r"'two' is not a positive integer"):
        plan([ngram("tp", extra_args=["--tensor-parallel-size", "two"])])
    with pytest.raises(PlanError, match=r"p.yml: configuration 'tp', field 'tensor_parallel_size': 0 is not"):
        plan([ngram("tp", tensor_parallel_size=0)])


def test_an_engine_field_given_twice_is_refused_naming_the_field():
    with pytest.raises(PlanError, match=r"p.yml: configuration 'tp', field 'tensor_parallel_size': also given as "
                                        r"--tensor-parallel-size in extra_args; give it once"):
        plan([ngram("tp", tensor_parallel_size=2, extra_args=["-tp", "2"])])


def test_new_plan_fields_left_at_defaults_keep_the_plan_hash():
    base = plan()   # the report's plan as dumped: its --max-model-len as the typed field (load_plan: as written)
    same = plan(packing="exclusive")
    assert same.plan_hash() == base.plan_hash()
    assert plan(packing="shared").plan_hash() != base.plan_hash()
    assert plan([ngram("x", gpu_model="H200")]).plan_hash() != plan([ngram("x")]).plan_hash()
    with pytest.raises(PlanError, match="packing"):
        plan(packing="sometimes")


def test_pick_prefers_a_contiguous_run_inside_one_nvlink_group():
    assert pick([0, 1, 2, 3], 2) == [0, 1]
    assert pick([0, 2, 3], 2) == [2, 3]
    assert pick([0, 2], 2) == [0, 2]                      # no topology known: any two
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert pick([3, 4], 2, groups) is None                # across the groups: never
    assert pick([1, 2, 3, 4, 5, 6, 7], 4, groups) == [4, 5, 6, 7]
    assert pick([3, 4, 5], 1, groups) == [3]              # the tightest group keeps the big one free


def test_simulate_runs_what_fits_at_once_and_exclusive_one_at_a_time():
    items = [("base", 1, 10.0), ("tp2", 2, 20.0), ("a", 1, 10.0), ("b", 1, 10.0)]
    span, starts = simulate(items, [0, 1, 2, 3])
    assert starts["base"] == (0.0, [0]) and starts["tp2"] == (0.0, [1, 2]) and starts["a"] == (0.0, [3])
    assert starts["b"] == (10.0, [0]) and span == 20.0
    assert simulate(items, [0, 1, 2, 3], packing="exclusive")[0] == 50.0
    with pytest.raises(ValueError, match="tp2 needs 2 GPU"):
        simulate(items, [0])


def test_parse_gpus_and_groups_refuse_what_would_mislead_the_runner():
    assert parse_gpus(2, "") == [{"index": 0}, {"index": 1}]
    assert parse_gpus([{"index": 1, "uuid": "GPU-b"}, {"index": 0, "uuid": "GPU-a"}], "")[0]["uuid"] == "GPU-a"
    for bad, msg in [(0, "at least 1"), (True, "a count"), ([{"index": 0}, {"index": 0}], "twice"),
                     ([{"index": 0, "uuid": "a,b"}], "without commas"), ([{"index": 0, "clock": 1}], "clock")]:
        with pytest.raises(ValueError, match=msg):
            parse_gpus(bad, "host 'w1'")
    with pytest.raises(ValueError, match=r"names GPU\(s\) \[4\]"):
        parse_groups([[0, 1], [4]], [0, 1, 2, 3], "host 'w1'")


def test_check_gpus_fills_uuids_from_nvidia_smi_and_refuses_a_mismatch():
    seen = [{"index": 0, "uuid": "GPU-a", "name": "H200", "used": 0}, {"index": 1, "uuid": "GPU-b", "name": "H200",
                                                                       "used": 0}]
    assert check_gpus([Gpu(1)], seen) == [Gpu(1, "GPU-b", "H200")]
    with pytest.raises(ValueError, match="GPU 1: nvidia-smi says UUID GPU-b, the inventory GPU-x"):
        check_gpus([Gpu(1, "GPU-x")], seen)
    with pytest.raises(ValueError, match="GPU 5 is not listed"):
        check_gpus([Gpu(5)], seen)


def nodes(n=2, g=4, name="NVIDIA H200", groups=None):
    return [NodeInfo(f"w{j + 1}", gpus=tuple({"index": i, "name": name} for i in range(g)), gpu_groups=groups)
            for j in range(n)]


SIX_AND_TP2 = [ngram(f"x{i}", k=i + 2) for i in range(6)] + \
    [{"name": "tp2", "speculative_config": None, "extra_args": ["--tensor-parallel-size", "2"]}]


def test_shared_split_uses_every_gpu_and_beats_the_one_server_per_node_split():
    p = plan(SIX_AND_TP2, packing="shared")
    s = split(p, nodes())
    assert all(q[0] == p.baseline for q in s.queues.values())
    assert sorted(c for q in s.queues.values() for c in q[1:]) == sorted(c.name for c in p.configurations[1:])
    ex = split(plan(SIX_AND_TP2, packing="exclusive"), nodes())
    assert s.makespan_s < 0.6 * ex.makespan_s
    assert s.lower_bound_s <= s.makespan_s


def test_one_gpu_nodes_and_exclusive_nodes_are_split_by_the_one_search_as_one_machine_each():
    p = load_plan(REPORT)
    one = split(p, [NodeInfo("w1"), NodeInfo("w2")])
    many = split(p, nodes(g=8))   # many GPUs, exclusive, 1-GPU configs: one machine per node as well
    assert one.makespan_s == many.makespan_s and one.method == many.method == "exact"
    assert all(abs(one.node_s[n] - sum(one.durations[c][n] for c in q)) < 1e-6 for n, q in one.queues.items())


def test_tp_configuration_needs_a_node_and_a_group_that_hold_it():
    p = plan([{"name": "tp4", "speculative_config": None, "extra_args": ["-tp", "4"]}], packing="shared")
    with pytest.raises(PlanError, match=r"'tp4' fits no selected node: needs 4 GPUs in one group, w1 has 4 in "
                                        r"NVLink groups"):
        split(p, nodes(groups=((0, 1), (2, 3))))
    s = split(p, nodes(n=1, g=2) + [NodeInfo("big", gpus=tuple({"index": i, "name": "H200"} for i in range(4)))])
    assert "tp4" in s.queues["big"]


def test_gpu_model_pin_and_whole_node():
    fleet = nodes(n=1, name="NVIDIA H100 80GB HBM3") + [
        NodeInfo("w9", gpus=tuple({"index": i, "name": "NVIDIA H200"} for i in range(4)))]
    p = plan([ngram("h200only", gpu_model="h200"), ngram("alone", whole_node=True)], packing="shared")
    s = split(p, fleet)
    assert "h200only" in s.queues["w9"]
    with pytest.raises(PlanError, match="gpu_model 'B200': w1 has NVIDIA H100"):
        split(plan([ngram("b", gpu_model="B200")]), fleet)
    with pytest.raises(PlanError, match="GPU names are unknown"):
        split(plan([ngram("b", gpu_model="H200")]), [NodeInfo("w1", gpus=({"index": 0}, {"index": 1}))])


def test_run_spec_lists_gpus_only_for_nodes_with_several():
    p = plan(SIX_AND_TP2 + [ngram("alone", whole_node=True)], packing="shared")
    paths = Paths(venv="/v", work_dir="/w")
    one = build_run_spec(p, "w1", ["vanilla", "tp2"], paths, gpus=[{"index": 0}], run_id="r").to_json()
    assert "gpus" not in one and "packing" not in one
    many = build_run_spec(p, "w1", ["vanilla", "alone"], paths, gpus=[{"index": 0}, {"index": 1}],
                          run_id="r").to_json()
    assert many["packing"] == "shared" and many["gpus"] == [{"index": 0}, {"index": 1}]
    assert many["items"][1]["whole_node"] is True and "whole_node" not in many["items"][0]


def test_polish_finds_the_order_the_size_orders_miss():
    # one node, 8 GPUs in two NVLink groups: TP=2 items queued after the 1-GPU ones wait for a pair
    # and run last (the tail); polish moves them forward
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    items = {"base": (1, 33.0), **{f"a{i}": (1, 31.0 - i) for i in range(13)},
             **{f"t{i}": (2, 23.0 if i < 3 else 19.0) for i in range(6)}}

    def end(q):
        return simulate([(c, *items[c]) for c in q], list(range(8)), groups)[0]
    longest_first = ["base", *sorted(items.keys() - {"base"}, key=lambda c: -items[c][1])]
    t, q = polish(end(longest_first), longest_first, end)
    assert t < end(longest_first) * 0.95 and q[0] == "base" and sorted(q) == sorted(items)
    assert end(q) == t


def test_slot_split_is_deterministic_and_its_simulations_are_bounded(monkeypatch):
    import specfleet.campaign.schedule.slotsplit as slotsplit
    # loads of different lengths: no split reaches the lower bound, so the search runs its whole budget
    many = [ngram(f"x{i}", k=2 + i % 6, load_estimate_s=300 + 37 * i) for i in range(30)] + \
        [{"name": f"tp{i}", "speculative_config": None, "extra_args": ["--tensor-parallel-size", "2"],
          "load_estimate_s": 500 + 91 * i} for i in range(6)]
    p = plan(many, packing="shared")
    fleet = nodes(n=2, g=8, groups=((0, 1, 2, 3), (4, 5, 6, 7)))
    counted = []
    monkeypatch.setattr(slotsplit, "MAX_SIMULATIONS", 12_000)   # the test's CPU: the rule, not the default, is tested
    real, packed = slotsplit.NodeSim.run, slotsplit.Search.packed
    monkeypatch.setattr(slotsplit.NodeSim, "run", lambda *a, **k: counted.append(1) or real(*a, **k))
    # a packed order counts as PACKED_COST simulations in the budget (its CPU)
    monkeypatch.setattr(slotsplit.Search, "packed",
                        lambda *a, **k: counted.extend([1] * slotsplit.PACKED_COST) or packed(*a, **k))
    a, b = split(p, fleet), split(p, fleet)
    assert a.queues == b.queues and a.makespan_s == b.makespan_s
    assert a.makespan_s <= 1.10 * a.lower_bound_s
    whole, counted[:] = len(counted) // 2, []
    monkeypatch.setattr(slotsplit, "MAX_SIMULATIONS", 0)
    split(p, fleet)   # the greedy start alone: it runs whatever the budget says
    budget, counted[:] = (len(counted) + whole) // 2, []   # half way into the search after it
    assert whole - budget >= 50
    monkeypatch.setattr(slotsplit, "MAX_SIMULATIONS", budget)
    small = split(p, fleet)
    # the budget is checked before each trial: a few node sets past it (one trial's orders) at most
    assert budget <= len(counted) <= budget + 2 * 5
    assert small.makespan_s >= a.makespan_s - 1e-6 and small.lower_bound_s == a.lower_bound_s


def every_gpu_plan(extra=SIX_AND_TP2, **top):
    raw = plan(extra, packing="shared").model_dump(mode="json")
    raw["equivalence"]["every_gpu"] = True
    raw.update(top)
    return parse_plan(raw, "p.yml")


def test_every_gpu_runs_the_baseline_pinned_on_each_gpu_of_every_node():
    p = every_gpu_plan()
    fleet = nodes(n=2, g=4) + [NodeInfo("one")]    # a one-GPU node: its baseline alone, no copies
    s = split(p, fleet)
    for n in ("w1", "w2"):
        assert s.queues[n][:4] == ["vanilla", "vanilla.gpu1", "vanilla.gpu2", "vanilla.gpu3"]
        assert s.durations["vanilla.gpu2"][n] == s.durations["vanilla"][n]
    assert s.queues["one"][0] == "vanilla" and not any(".gpu" in c for c in s.queues["one"])
    # every other configuration once, the copies not counted as configurations
    placed = [c for q in s.queues.values() for c in q if c != "vanilla" and ".gpu" not in c]
    assert sorted(placed) == sorted(c.name for c in p.configurations[1:])
    # the copies' work is in the bound: it can only grow
    assert s.lower_bound_s > split(plan(SIX_AND_TP2, packing="shared"), fleet).lower_bound_s
    spec = build_run_spec(p, "w1", s.queues["w1"], Paths(venv="/v", work_dir="/w"),
                          gpus=[{"index": i} for i in range(4)], run_id="r").to_json()
    pins = {it["name"]: it.get("gpu_pin") for it in spec["items"]}
    assert [pins[f"vanilla{x}"] for x in ("", ".gpu1", ".gpu2", ".gpu3")] == [0, 1, 2, 3]
    assert all(v is None for k, v in pins.items() if not k.startswith("vanilla"))
    copy = next(it for it in spec["items"] if it["name"] == "vanilla.gpu2")
    assert copy["serve"] == spec["items"][0]["serve"]          # the baseline's server ...
    assert copy["bench"][0]["result_file"].startswith("vanilla.gpu2_conc")  # ... its own results
    assert ["config", "vanilla.gpu2"] in copy["client"]["metadata"]


def test_every_gpu_is_refused_where_it_would_compare_nothing_and_its_names_are_reserved():
    with pytest.raises(PlanError, match="p.yml: field 'equivalence.every_gpu': needs packing: shared"):
        every_gpu_plan(packing="exclusive")
    # a plan that asks for it is another campaign (its queues differ); one that does not keeps its hash
    assert every_gpu_plan().plan_hash() != plan(SIX_AND_TP2, packing="shared").plan_hash()
    with pytest.raises(PlanError, match=r"'vanilla.gpu2' is the baseline's run on another GPU"):
        plan([ngram("vanilla.gpu2")])


def test_simulate_honours_gpu_pins():
    span, starts = simulate([("b", 1, 10.0, 2), ("a", 1, 10.0), ("c", 1, 5.0, 2)], [0, 1, 2])
    assert starts["b"] == (0.0, [2]) and starts["a"] == (0.0, [0]) and starts["c"] == (10.0, [2]) and span == 15.0
    with pytest.raises(ValueError, match="pinned to GPU 7"):
        simulate([("b", 1, 1.0, 7)], [0, 1])
