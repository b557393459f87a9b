"""The runner on a node with several GPUs: servers at once on disjoint GPU sets (slots.py), real
processes, the fake vllm/nvidia-smi of tests/worker/fakes (4 GPUs listed in gpus.json)."""
import json
import os
import signal
import time
from datetime import datetime

import pytest

from specfleet.campaign.commands import Paths
from specfleet.plan import parse_plan
from specfleet.campaign.spec import build_run_spec, dump_run_spec
from specfleet.worker.runspec import Gpu, ItemState, RunSpec

GPUS = [{"uuid": f"GPU-0000000{i}-fake", "name": "Fake H200"} for i in range(4)]


def four_gpus(bed, packing="shared", faults=None, stop_timeout_s=10, tp2=True):
    (bed.gpu / "gpus.json").write_text(json.dumps(GPUS))
    raw = bed.plan(faults=faults, stop_timeout_s=stop_timeout_s).model_dump(mode="json")
    if tp2:
        raw["configurations"].append({"name": "tp2", "speculative_config": None,
                                      "extra_args": ["--tensor-parallel-size", "2",
                                                     *(["--fake-fault", faults["tp2"]] if "tp2" in (faults or {})
                                                       else [])]})
    raw["configurations"].append({"name": "ngram5", "speculative_config": {"method": "ngram",
                                                                            "num_speculative_tokens": 5}})
    raw["packing"] = packing
    return parse_plan(raw, bed.tmp / "plan.yml")


def spec(bed, plan, queue=None, name="run.json"):
    queue = queue or [c.name for c in plan.configurations]
    s = build_run_spec(plan, "w1", queue, Paths(venv=str(bed.venv), work_dir=str(bed.work)),
                       env_file=str(bed.env_file), run_id="test-run", gpus=[{"index": i} for i in range(4)])
    path = bed.tmp / name
    path.write_text(dump_run_spec(s))
    return path


def span(rec):
    t = lambda x: datetime.strptime(x, "%Y-%m-%dT%H:%M:%SZ").timestamp()  # noqa: E731
    return t(rec["started_at"]), t(rec["finished_at"])


def per_gpu_used(bed) -> dict:
    import subprocess
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.used", "--format=csv,noheader"],
                         env=bed.env(), capture_output=True, text=True).stdout
    return {line.split(", ")[1]: int(line.split(", ")[3]) for line in out.splitlines()}


@pytest.fixture(autouse=True)
def slow_fakes(monkeypatch):
    monkeypatch.setenv("FAKE_LOAD_S", "1.5")
    monkeypatch.setenv("FAKE_BENCH_S", "1.0")


def test_shared_runs_servers_at_once_on_disjoint_gpus_and_frees_each(bed):
    p = four_gpus(bed)
    rc = bed.run(spec(bed, p), timeout=120)
    items = bed.items()
    assert rc == 0, bed.log()
    assert all(i["status"] == "done" for i in items.values()), items
    assert [len(items[n]["gpus"]) for n in ("vanilla", "tp2")] == [1, 2]
    # overlapping items ran on disjoint GPU sets and distinct ports
    names = list(items)
    overlapped = 0
    for a in names:
        for b in names:
            if a < b:
                (sa, ea), (sb, eb) = span(items[a]), span(items[b])
                if sa < eb and sb < ea:
                    overlapped += 1
                    assert not {g["uuid"] for g in items[a]["gpus"]} & {g["uuid"] for g in items[b]["gpus"]}
                    assert items[a]["port"] != items[b]["port"]
    assert overlapped >= 3
    # the server saw its GPUs by UUID; each result says where it ran
    log = (bed.run_dir / "tp2.server.log").read_text()
    assert f"CUDA_VISIBLE_DEVICES={','.join(g['uuid'] for g in items['tp2']['gpus'])}" in log
    res = json.loads((bed.run_dir / "tp2_conc1.json").read_text())
    assert res["gpu_uuids"] == ",".join(g["uuid"] for g in items["tp2"]["gpus"]) and res["packing"] == "shared"
    assert res["gpu_names"] == "Fake H200,Fake H200"
    assert set(per_gpu_used(bed).values()) == {0}
    assert bed.state()["gpus"][3]["uuid"] == GPUS[3]["uuid"]


def test_exclusive_runs_one_server_at_a_time(bed):
    p = four_gpus(bed, packing="exclusive", tp2=False)
    assert bed.run(spec(bed, p), timeout=120) == 0, bed.log()
    recs = sorted(bed.items().values(), key=lambda r: span(r)[0])
    for a, b in zip(recs, recs[1:]):
        assert span(a)[1] <= span(b)[0]
    assert {r["port"] for r in recs} == {bed.port}   # always the first GPU: the plan's port


def test_a_server_killed_mid_run_fails_its_own_item_alone_and_resume_redoes_only_it(bed, monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_S", "4")
    p = four_gpus(bed)
    path = spec(bed, p)
    runner = bed.start(path)
    victim = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and victim is None:
        time.sleep(0.2)
        try:
            busy = [i for i in bed.state()["items"] if i["status"] == "benchmarking" and i["name"] == "ngram"]
        except (OSError, ValueError):
            continue
        if busy:
            victim = busy[0]["server_pid"]
    assert victim, bed.log()
    os.killpg(victim, signal.SIGKILL)
    assert runner.wait(timeout=120) == 1
    items = bed.items()
    assert items["ngram"]["status"] == "failed" and "exited with code -9" in items["ngram"]["error"]
    assert all(i["status"] == "done" for n, i in items.items() if n != "ngram"), items
    assert set(per_gpu_used(bed).values()) == {0}
    monkeypatch.setenv("FAKE_BENCH_S", "0.3")
    assert bed.run(path, timeout=120) == 0, bed.log()
    items = bed.items()
    assert items["ngram"]["status"] == "done" and items["ngram"]["attempts"] == 2
    assert items["vanilla"]["phase"] == "done earlier" and items["vanilla"]["attempts"] == 1


def test_a_gpu_set_that_keeps_its_memory_is_kept_out_while_the_others_go_on(bed, monkeypatch):
    monkeypatch.setenv("FAKE_HOLD_S", "40")
    p = four_gpus(bed, faults={"vanilla": "orphan-holds-gpu"}, stop_timeout_s=3, tp2=False)
    rc = bed.run(spec(bed, p), timeout=120)
    items, st = bed.items(), bed.state()
    assert rc == 4, bed.log()
    held = items["vanilla"]["gpus"][0]
    assert items["vanilla"]["status"] == "failed" and "GPU memory still" in items["vanilla"]["error"]
    assert all(i["status"] == "done" for n, i in items.items() if n != "vanilla"), items
    assert all(held["uuid"] not in {g["uuid"] for g in i["gpus"]} for n, i in items.items() if n != "vanilla")
    assert f"GPU {held['index']}" in st["error"] and st["status"] == "failed"


def test_an_inventory_uuid_that_is_not_the_nodes_stops_before_any_server(bed):
    p = four_gpus(bed, tp2=False)
    path = spec(bed, p)
    s = json.loads(path.read_text())
    s["gpus"][1]["uuid"] = "GPU-other-node"
    path.write_text(json.dumps(s))
    assert bed.run(path) == 2
    st = bed.state()
    assert "GPU 1: nvidia-smi says UUID GPU-00000001-fake, the inventory GPU-other-node" in st["error"]
    assert all(i["status"] == "pending" for i in st["items"])


def test_sigterm_stops_every_server_and_resume_finishes_the_queue(bed, monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_S", "3")
    p = four_gpus(bed)
    path = spec(bed, p)
    runner = bed.start(path)
    deadline = time.monotonic() + 60
    running = []
    while time.monotonic() < deadline and len(running) < 2:
        time.sleep(0.2)
        try:
            running = [i for i in bed.state()["items"] if i["status"] == "benchmarking"]
        except (OSError, ValueError):
            continue
    assert len(running) >= 2, bed.log()
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=60) == 143
    st = bed.state()
    assert st["status"] == "stopped"
    # a server seen benchmarking is redone on resume; one whose last bench run had ended before the
    # signal (its result being read, seconds at load 15) may still finish as done, never as failed
    after = {i["name"]: i["status"] for i in st["items"]}
    assert all(after[i["name"]] in ("pending", "done") for i in running), \
        ([(i["name"], i["status"], i["phase"], i["error"]) for i in st["items"]], bed.log()[-3000:])
    assert "pending" in after.values()   # the queue was stopped, not finished
    assert set(per_gpu_used(bed).values()) == {0}   # every server and engine ended
    monkeypatch.setenv("FAKE_BENCH_S", "0.3")
    assert bed.run(path, timeout=120) == 0, bed.log()
    assert all(i["status"] == "done" for i in bed.items().values())


def test_a_server_stop_never_ends_a_neighbour_runners_engine_of_the_same_name(bed):
    """The testbed's workers share one PID namespace (and a node may run another campaign): their
    runners see each other's processes, with the same configuration names. Stopping this run's
    `vanilla` must end its own leftovers only, never an engine of another run dir named `vanilla`
    (before: the leftover search matched SPECFLEET_SERVER=vanilla and SIGTERMed w2's EngineCore
    when w1's vanilla stopped; w2's streams ended without [DONE])."""
    import subprocess
    import sys

    from specfleet.worker.lane import server_tag
    other = str(bed.tmp / "other-work" / "t" / "w2")
    decoys = [subprocess.Popen(["VLLM::EngineCore", "-c", "import time; time.sleep(300)"], executable=sys.executable,
                               env={"PATH": os.environ["PATH"], "SPECFLEET_RUN_DIR": other, "SPECFLEET_SERVER": tag},
                               start_new_session=True)
              for tag in ("vanilla", server_tag(other, "vanilla"))]
    try:
        rc = bed.run(spec(bed, four_gpus(bed, tp2=False)), timeout=120)
        assert rc == 0, bed.log()
        assert bed.items()["vanilla"]["status"] == "done"
        assert [d.poll() for d in decoys] == [None, None], bed.log()
    finally:
        for d in decoys:
            d.kill()
            d.wait()


def test_crossover_rounds_run_on_a_node_with_several_gpus_once_every_slot_is_idle(bed, monkeypatch):
    """Before: the GPU pool ran the spec's items and returned, the refinement rounds never ran there."""
    monkeypatch.setenv("FAKE_CROSSOVER", "ngram:12")   # ngram pays below c=12, loses above (tests/worker/fakes)
    monkeypatch.setenv("FAKE_BENCH_S", "0.05")
    monkeypatch.setenv("FAKE_LOAD_S", "0.3")
    (bed.gpu / "gpus.json").write_text(json.dumps(GPUS))
    raw = bed.plan(benchmark={"concurrencies": {"search": "crossover", "min": 1, "max": 32, "coarse_factor": 4,
                                                "per_doubling": 2, "budget": 8},
                              "num_prompts": 8, "min_prompts_per_concurrency": 0.5}).model_dump(mode="json")
    raw["packing"] = "shared"
    path = spec(bed, parse_plan(raw, bed.tmp / "plan.yml"), queue=["vanilla", "ngram"])
    assert bed.run(path, timeout=180) == 0, bed.log()
    st = bed.state()
    x = st["crossover"]["configs"]["ngram"]
    assert x["why"].startswith("done"), x
    rounds = [i for i in st["items"] if ".round" in i["name"]]
    assert rounds and all(i["status"] == "done" and i["gpus"] for i in rounds), rounds
    assert {i["name"].split(".")[0] for i in rounds} == {"vanilla", "ngram"}
    for c in x["points"]:   # every refined cell measured by both, the baseline on the same node
        for cfg in ("vanilla", "ngram"):
            assert json.loads((bed.run_dir / f"{cfg}_conc{c}.json").read_text())["max_concurrency"] == int(c)
    # a round starts only when no server runs: its items begin after every earlier item ended
    first = [i for i in st["items"] if ".round" not in i["name"]]
    assert min(span(i)[0] for i in rounds) >= max(span(i)[1] for i in first)
    assert set(per_gpu_used(bed).values()) == {0}
    # resume: every cell is there, nothing new is measured
    before = {p.name: p.stat().st_mtime_ns for p in bed.run_dir.glob("*_conc*.json")}
    assert bed.run(path, timeout=120) == 0, bed.log()
    assert {p.name: p.stat().st_mtime_ns for p in bed.run_dir.glob("*_conc*.json")} == before


def test_every_gpu_runs_the_baseline_on_each_gpu_by_its_pin(bed):
    p = four_gpus(bed)
    raw = p.model_dump(mode="json")
    raw["equivalence"]["every_gpu"] = True
    p = parse_plan(raw, bed.tmp / "plan.yml")
    queue = ["vanilla", "vanilla.gpu1", "vanilla.gpu2", "vanilla.gpu3", "ngram5", "tp2"]
    rc = bed.run(spec(bed, p, queue), timeout=120)
    items = bed.items()
    assert rc == 0, bed.log()
    assert [items[n]["gpus"][0]["uuid"] for n in queue[:4]] == [g["uuid"] for g in GPUS]
    for n in queue[:4]:   # each copy wrote its own result, stamped with the GPU it ran on
        res = json.loads(next(p for p in bed.run_dir.glob(f"{n}_conc*.json") if not p.name.endswith(".record.json")
                              ).read_text())
        assert res["gpu_uuids"] == items[n]["gpus"][0]["uuid"] and res["config"] == n
    assert all(i["status"] == "done" for i in items.values())


def test_an_item_pinned_to_a_gpu_kept_out_fails_alone_and_says_why(bed, monkeypatch):
    monkeypatch.setenv("FAKE_HOLD_S", "40")
    p = four_gpus(bed, faults={"vanilla": "orphan-holds-gpu"}, stop_timeout_s=3, tp2=False)
    path = spec(bed, p, ["vanilla", "ngram5"])
    s = json.loads(path.read_text())
    s["items"][0]["gpu_pin"], s["items"][1]["gpu_pin"] = 0, 0   # both on GPU 0; vanilla's orphan holds it
    path.write_text(json.dumps(s))
    rc = bed.run(path, timeout=120)
    items = bed.items()
    assert rc == 4, bed.log()
    assert items["vanilla"]["gpus"][0]["index"] == 0 and "GPU memory still" in items["vanilla"]["error"]
    assert items["ngram5"]["status"] == "failed" and "pinned to GPU 0, which is kept out" in items["ngram5"]["error"]


def test_a_runner_bug_in_one_lane_fails_that_item_and_leaves_the_stopped_one_pending(bed, monkeypatch):
    """A lane that ends with anything but ItemFailed / Stopped / Fatal (a runner bug) while another
    lane runs: the pool stops the other lane, then abort records the crash on the item it happened
    in (before: on state["current"], the item started last, while the crashed one stayed
    'benchmarking' in a finished state)."""
    from specfleet.worker.host import Stopped
    from specfleet.worker.lane import Lane
    from specfleet.worker.runner import Runner
    s = RunSpec.load(spec(bed, four_gpus(bed, tp2=False), ["vanilla", "ngram"]))
    runner = Runner(s)
    os.makedirs(runner.run_dir)
    runner.load_state()

    def run_item(lane, item, rec):   # vanilla crashes once ngram runs beside it; ngram runs until stopped
        runner.set(rec, "benchmarking", "bench")
        while item.name == "vanilla" and runner.state.items[1].status != "benchmarking":
            time.sleep(0.01)
        if item.name == "vanilla":
            raise RuntimeError("a runner bug")
        while not runner.stopping:
            time.sleep(0.01)
        raise Stopped("stopped")
    monkeypatch.setattr(Lane, "run_item", run_item)
    gpus = [Gpu(index=i, **g) for i, g in enumerate(GPUS)]
    with pytest.raises(RuntimeError) as crash:
        runner.pool(list(zip(s.items, runner.state.items)), gpus)
    runner.abort(crash.value)
    st = json.loads((bed.run_dir / "state.json").read_text())
    items = {i["name"]: i for i in st["items"]}
    assert st["status"] == "failed" and "runner crashed: RuntimeError: a runner bug" in st["error"]
    assert items["vanilla"]["status"] == "failed", items
    assert "RuntimeError: a runner bug" in items["vanilla"]["error"]
    assert items["ngram"]["status"] == "pending", items


def test_sigterm_as_a_crossover_round_ends_stops_the_runner_with_the_next_round_pending(bed, monkeypatch):
    """fab stop while the last server of a round stops: the search is not finished, so the runner is
    stopped (143) with the next round pending for the resume (before: 'done', exit 0, with the
    search's rounds never run)."""
    from specfleet.worker.lane import Lane
    from specfleet.worker.runner import EXIT_STOPPED, Runner
    raw = bed.plan(benchmark={"concurrencies": {"search": "crossover", "min": 1, "max": 32, "coarse_factor": 4,
                                                "per_doubling": 2, "budget": 8},
                              "num_prompts": 8, "min_prompts_per_concurrency": 0.5}).model_dump(mode="json")
    s = RunSpec.load(bed.spec(parse_plan(raw, bed.tmp / "plan.yml"), queue=["vanilla", "ngram"]))
    runner = Runner(s)
    os.makedirs(runner.run_dir)
    runner.load_state()

    def run_item(lane, item, rec):   # results as tests/worker/fakes' FAKE_CROSSOVER=ngram:12 measures them
        for b in item.bench:
            c = b.concurrency
            tput = 100.0 * c * ((12 / c) ** 0.5 if item.name.startswith("ngram") else 1.0)
            with open(os.path.join(item.client.result_dir, b.result_file), "w") as f:
                json.dump({"output_throughput": tput, "completed": b.num_prompts}, f)
        runner.stopping = runner.stopping or item.name == "ngram"   # SIGTERM as ngram's server stops
        runner.set(rec, "done", "done")
    monkeypatch.setattr(Lane, "run_item", run_item)
    assert runner.pool(list(zip(s.items, runner.state.items)), None) == EXIT_STOPPED
    st = json.loads((bed.run_dir / "state.json").read_text())
    assert st["status"] == "stopped", st
    assert [i["status"] for i in st["items"] if ".round" in i["name"]] == ["pending", "pending"], st["items"]



def test_a_lane_writing_the_state_while_the_pool_starts_another_never_crashes(bed, monkeypatch):
    """Every change to state.json's records is made under Runner.lock: json's indented encoder
    iterates each record, and one that gains a key meanwhile (the pool giving an item its GPUs and
    port) raised 'dictionary changed size during iteration' in the lane that was writing, a runner
    crash (exit 4). The record's walk is slowed to meet that interleaving every time."""
    import threading

    from specfleet.worker import runner as runner_mod
    from specfleet.worker.lane import Lane

    class SlowRecord(ItemState):   # the state's writer walks it in ~60 ms instead of microseconds
        def to_json(self):
            out = super().to_json()
            for _ in out:
                time.sleep(0.003)
            return out
    s = RunSpec.load(spec(bed, four_gpus(bed, tp2=False), ["vanilla", "ngram"]))
    runner = runner_mod.Runner(s)
    os.makedirs(runner.run_dir)
    runner.load_state()
    vanilla, ngram = runner.state.items
    runner.state.items[1] = ngram = SlowRecord(**vars(ngram))
    errors, stop = [], threading.Event()

    def run_item(lane, item, rec):   # the first lane records its phase over and over, as lanes do
        while item.name == "vanilla" and not stop.is_set():
            try:
                runner.set(rec, phase="bench")
            except RuntimeError as e:
                errors.append(e)
                return
    monkeypatch.setattr(Lane, "run_item", run_item)
    by_index = {i: Gpu(index=i, **g) for i, g in enumerate(GPUS)}
    try:
        runner.start(s.items[0], vanilla, [0], by_index, [])
        time.sleep(0.2)   # vanilla's lane is writing the state, walking ngram's record
        runner.start(s.items[1], ngram, [1], by_index, [])
    finally:
        stop.set()
    assert not errors, errors
