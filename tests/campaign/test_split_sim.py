"""The split's simulated pool (gpusets.NodeSim.run): its admission table, the runner's rule on wide
servers and pins, and the packed queue order (the worker's own pool: test_pool_vs_runner.py)."""
import random

import pytest

from specfleet.campaign.schedule.gpusets import NodeSim, simulate


def random_node(rng: random.Random):
    """A node of 1-8 GPUs with arbitrary indices, sometimes two NVLink groups, and a queue of 0-14 items
    (1-GPU, TP=2, TP=4, a whole group; some pinned; ties in duration so that ends coincide)."""
    g = rng.choice([1, 2, 3, 4, 6, 8])
    gpus = sorted(rng.sample(range(12), g))
    groups = [gpus[:g // 2], gpus[g // 2:]] if g >= 4 and rng.random() < 0.5 else None
    widest = max(map(len, groups)) if groups else g
    items = []
    for i in range(rng.randint(0, 14)):
        need = min(rng.choice([1, 1, 1, 2, 2, 4, widest]), widest)
        seconds = rng.uniform(1, 30) if rng.random() < 0.5 else 5.0 * rng.randint(1, 5)
        pin = rng.choice(gpus) if need == 1 and rng.random() < 0.2 else None
        items.append((f"i{i}", need, seconds, pin))
    return items, gpus, groups, rng.choice(["shared"] * 4 + ["exclusive"])


@pytest.mark.parametrize("seed", range(4))
def test_node_sim_ends_where_it_did_once_its_admission_table_is_filled(seed):
    rng = random.Random(seed)
    differ, waited = [], 0
    for _ in range(500):
        items, gpus, groups, packing = random_node(rng)
        want, starts = simulate(items, gpus, groups, packing)
        sim = NodeSim(gpus, groups, packing)
        got = sim.run([sim.row(need, s, pin) for _, need, s, pin in items])
        got_again = sim.run([sim.row(need, s, pin) for _, need, s, pin in items])   # its table filled
        waited += any(start > 0 for start, _ in starts.values())
        if not (got == want == got_again):
            differ.append((items, gpus, groups, packing, want, got, got_again))
    assert not differ, differ[:3]
    assert waited > 250   # the cases queue: most have items that wait for GPUs to come free


def test_node_sim_keeps_the_runners_rule_for_wide_servers_and_pins():
    # 8 GPUs in two groups, GPU 5 pinned first: the 1-GPU items fill the tighter group (4-7, as
    # slots.pick does), so the TP=4 server still finds 0-3 whole and starts at once; the second item
    # pinned to GPU 5 waits for it (10 s) and ends at 13
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    items = [("p", 1, 10.0, 5), ("a", 1, 10.0, None), ("b", 1, 10.0, None), ("c", 1, 10.0, None),
             ("w", 4, 7.0, None), ("q", 1, 3.0, 5)]
    sim = NodeSim(list(range(8)), groups)
    assert sim.run([sim.row(need, s, pin) for _, need, s, pin in items]) == 13.0
    assert simulate(items, list(range(8)), groups)[0] == 13.0
    # one GPU of each group pinned busy: the TP=4 server waits for a whole group (10 s) and ends at 17
    late = [("p", 1, 10.0, 0), ("p4", 1, 10.0, 4), ("w", 4, 7.0, None)]
    assert sim.run([sim.row(need, s, pin) for _, need, s, pin in late]) == \
        simulate(late, list(range(8)), groups)[0] == 17.0


def one_node_search(durations: dict[str, float], gpus: int):
    """A slotsplit.Search over one node of `gpus` GPUs whose queue holds the baseline 'base' and
    one-GPU items of the given durations."""
    from specfleet.campaign.schedule.slotsplit import Search
    from specfleet.campaign.schedule.split import NodeInfo
    node = NodeInfo("w1", gpus=tuple({"index": i} for i in range(gpus)))
    others = sorted(durations.keys() - {"base"})
    dur = {c: {"w1": d} for c, d in durations.items()}
    need = {c: {"w1": 1} for c in durations}
    return Search(["w1"], {"w1": node}, {"w1": ["base"]}, others, {c: ["w1"] for c in others}, {}, dur, need,
                  "shared", {"w1": {}}, [["w1"]]), others


def test_packed_order_ends_no_later_than_longest_first_and_often_sooner():
    """Search.packed: one-GPU items packed onto the GPUs (longest first, then moves and swaps off the
    busiest GPU), queued by planned start. The runner's rule in that order starts each item no later
    than planned, so it never ends after the longest-first queue (whose plan it starts from)."""
    rng = random.Random(3)
    sooner = 0
    for _ in range(200):
        gpus = rng.choice([2, 4, 8])
        durations = {"base": rng.uniform(10, 20),
                     **{f"c{i}": rng.uniform(10, 22) for i in range(rng.randint(gpus, 5 * gpus))}}
        search, others = one_node_search(durations, gpus)
        packed = search.packed("w1", frozenset(others))
        assert packed[0] == "base" and sorted(packed[1:]) == others
        longest = ["base", *sorted(others, key=lambda c: (-durations[c], c))]
        assert search.end("w1", packed) <= search.end("w1", longest) + 1e-9
        sooner += search.end("w1", packed) < search.end("w1", longest) - 1e-6
    assert sooner > 50
