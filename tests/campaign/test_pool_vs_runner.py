"""The split's simulated pool (gpusets.simulate / NodeSim.run) against the worker's own pool
(worker.runner.Runner.pool) on the same queues: the same start, GPU set and end for every item.

The runner runs for real (its admission rule, its state.json writes, one thread per lane) with fake
lanes on a fake clock: a lane "takes" its item's duration by waiting until the pool's poll sleep
moves the clock to its end. The sleep first waits for every started lane to report, then advances to
the earliest end and lets those lanes finish, so the runner sees the same moments the simulation does.
"""
import dataclasses
import random
import threading
import types
from pathlib import Path

import pytest

from specfleet.campaign.commands import Paths
from specfleet.campaign.schedule.gpusets import simulate
from specfleet.campaign.spec import build_run_spec
from specfleet.plan import load_plan, parse_plan
from specfleet.worker import runner as runner_mod
from specfleet.worker.runspec import Gpu

REPORT_PLAN = Path(__file__).resolve().parents[2] / "plans" / "qwen3-32b.yml"


class FakeClock:
    """The runner's time.sleep, and its lanes: each lane waits on an event the clock sets at its end."""

    def __init__(self, seconds: dict[str, float]):
        self.t, self.seconds = 0.0, seconds
        self.lanes_made = 0
        self.running: dict[str, tuple[float, threading.Event, threading.Thread]] = {}
        self.changed = threading.Condition()

    def lane(self, runner, gpus, port_):
        clock = self
        clock.lanes_made += 1

        class FakeLane:
            held_why = None
            port = port_

            def run_item(self, item, rec):
                ev = threading.Event()
                with clock.changed:
                    clock.running[item.name] = (clock.t + clock.seconds[item.name], ev,
                                                   threading.current_thread())
                    clock.changed.notify_all()
                assert ev.wait(30), "the fake clock never reached this lane's end"
                runner.set(rec, "done", "done", finished_at="fake")

            def end(self):
                pass
        return FakeLane()

    def sleep(self, _s):
        with self.changed:   # every lane the pool started has reported its end
            assert self.changed.wait_for(lambda: len(self.running) + self.ended == self.lanes_made, 30)
            if not self.running:
                return
            self.t = min(end for end, _, _ in self.running.values())
            due = [n for n, (end, _, _) in self.running.items() if end <= self.t + 1e-9]
            lanes = [self.running.pop(n) for n in due]
            self.ended += len(lanes)
        for _, ev, thread in lanes:
            ev.set()
            thread.join(30)   # its end is in the pool's `finished` list before the pool looks again

    ended = 0


def plan_with(items: list[tuple[str, int, bool]]):
    """The report's plan with configurations c0.. of the given tensor-parallel sizes (whole_node where asked)."""
    raw = load_plan(REPORT_PLAN).model_dump(mode="json")
    raw["configurations"] = raw["configurations"][:1] + [
        {"name": name, "speculative_config": None, "whole_node": whole,
         **({"extra_args": ["--tensor-parallel-size", str(tp)]} if tp > 1 else {})}
        for name, tp, whole in items]
    return parse_plan(raw)


def run_worker_pool(tmp_path, monkeypatch, queue, gpus, groups, packing, pins, seconds):
    """(end, {name: (start, GPU set)}) of the worker's Runner.pool on `queue` (plan_with's items)."""
    plan = plan_with(queue)
    raw = plan.model_dump(mode="json")
    raw["packing"] = packing
    plan = parse_plan(raw)
    names = [plan.baseline, *(n for n, _, _ in queue)]
    node_gpus = [{"index": i} for i in gpus] if len(gpus) > 1 else None
    spec = build_run_spec(plan, "w1", names, Paths(venv="/nonexistent", work_dir=str(tmp_path)),
                          run_id="pool-vs-sim", gpus=node_gpus, gpu_groups=groups)
    spec = dataclasses.replace(spec, items=[dataclasses.replace(it, gpu_pin=pins[it.name]) if it.name in pins else it
                                            for it in spec.items])
    clock = FakeClock(seconds)
    starts = {}
    monkeypatch.setattr(runner_mod, "Lane", clock.lane)
    monkeypatch.setattr(runner_mod, "time", types.SimpleNamespace(sleep=clock.sleep))
    real_start = runner_mod.Runner.start

    def start(self, item, rec, got, by_index, finished):
        starts[item.name] = (clock.t, [] if got == [None] else list(got))
        real_start(self, item, rec, got, by_index, finished)
    monkeypatch.setattr(runner_mod.Runner, "start", start)
    r = runner_mod.Runner(spec)
    Path(r.run_dir).mkdir(parents=True)
    r.load_state()
    rc = r.pool(list(zip(spec.items, r.state.items)), [Gpu(i, f"GPU-{i}", "fake") for i in gpus] if node_gpus else None)
    assert rc == 0, r.state
    return clock.t, starts


def random_queue(rng: random.Random):
    g = rng.choice([1, 2, 4, 8])
    gpus = list(range(g))
    groups = [gpus[:g // 2], gpus[g // 2:]] if g >= 4 and rng.random() < 0.5 else None
    widest = max(map(len, groups)) if groups else g
    queue, pins, seconds = [], {}, {"vanilla": 5.0 * rng.randint(1, 4)}
    for i in range(rng.randint(1, 8)):
        tp = min(rng.choice([1, 1, 1, 2, 4]), widest) if g > 1 else 1
        tp = tp if tp in (1, 2, 4) else 1
        whole = g > 1 and not groups and rng.random() < 0.1
        name = f"c{i}"
        queue.append((name, tp, whole))
        seconds[name] = 5.0 * rng.randint(1, 5)   # ties: ends that coincide are the hard moments
        if g > 1 and tp == 1 and not whole and rng.random() < 0.2:
            pins[name] = rng.choice(gpus)
    if g > 1 and rng.random() < 0.3:
        pins["vanilla"] = rng.choice(gpus)
    return queue, gpus, groups, rng.choice(["shared"] * 3 + ["exclusive"]), pins, seconds


@pytest.mark.parametrize("seed", range(4))
def test_the_simulated_pool_starts_ends_and_places_as_the_workers_pool(seed, tmp_path, monkeypatch):
    rng = random.Random(seed)
    differ, waited = [], 0
    for k in range(40):
        queue, gpus, groups, packing, pins, seconds = random_queue(rng)
        with monkeypatch.context() as m:
            got_end, got = run_worker_pool(tmp_path / str(k), m, queue, gpus, groups, packing, pins, seconds)
        need = {"vanilla": 1, **{n: (len(gpus) if whole else tp) for n, tp, whole in queue}}
        items = [(n, need[n], seconds[n], pins.get(n)) for n in ["vanilla", *(n for n, _, _ in queue)]]
        want_end, want = simulate(items, gpus, groups, packing if len(gpus) > 1 else "exclusive")
        if len(gpus) == 1:   # the one-GPU runner has one slot and no GPU indices
            want = {n: (t, []) for n, (t, _) in want.items()}
        waited += any(t > 0 for t, _ in got.values())
        if not (got == want and got_end == want_end):
            differ.append((queue, gpus, groups, packing, pins, seconds, got, want))
    assert not differ, differ[:2]
    assert waited > 30   # most queues have items that wait for GPUs to come free


def test_the_worker_pool_on_a_queue_that_waits_for_a_whole_group_and_a_pinned_gpu(tmp_path, monkeypatch):
    """A hand-made case: on 8 GPUs in two groups, 1-GPU items fill the tighter group, the TP=4 server
    still finds 0-3 whole; an item pinned to the busy GPU 5 waits for it."""
    queue = [("a", 1, False), ("b", 1, False), ("w", 4, False), ("q", 1, False)]
    seconds = {"vanilla": 10.0, "a": 10.0, "b": 10.0, "w": 7.0, "q": 3.0}
    groups = [[0, 1, 2, 3], [4, 5, 6, 7]]
    end, starts = run_worker_pool(tmp_path, monkeypatch, queue, list(range(8)), groups, "shared",
                                  {"vanilla": 5, "q": 5}, seconds)
    assert end == 13.0
    assert starts["w"] == (0.0, [0, 1, 2, 3]) and starts["q"] == (10.0, [5])
    assert end == simulate([(n, {"w": 4}.get(n, 1), seconds[n], {"vanilla": 5, "q": 5}.get(n))
                            for n in ["vanilla", "a", "b", "w", "q"]], list(range(8)), groups)[0]
