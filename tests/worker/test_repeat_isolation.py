"""Independent repeats (benchmark.repeat_isolation) and gate runs added later (fab bench --gate-runs):
the queue the bastion builds, and the runner measuring it against the fake engine."""
import json
import shlex

import yaml

from specfleet.campaign.commands import Paths, commands_for
from specfleet.campaign.spec import build_run_spec, dump_run_spec
from specfleet.plan import parse_plan
from specfleet.worker.runner import EXIT_OK
from specfleet.worker.runspec import Item

from plan.test_plan import MINI

PATHS = Paths(venv="/v", work_dir="/w", dataset="/w/q.jsonl")


def plan_of(**bench):
    raw = yaml.safe_load(MINI)
    raw["benchmark"].update(bench)
    return parse_plan(raw)


def metadata(item: dict, k: int = 0) -> dict:
    """The --metadata pairs of the item's k-th bench run as the worker renders them."""
    it = Item.from_json(item)
    argv = it.bench[k].argv(it.client, model=None, vllm_version=None, host="127.0.0.1", port=8000)
    return dict(w.split("=", 1) for w in argv[argv.index("--metadata") + 1:])


def test_by_default_each_repeat_is_its_own_server_start_with_baseline_and_configuration_interleaved():
    p = plan_of()
    assert p.benchmark.repeat == 3 and p.benchmark.repeat_isolation == "server-start"
    items = build_run_spec(p, "w1", ["vanilla", "ng"], PATHS).to_json()["items"]
    assert [i["name"] for i in items] == ["vanilla", "ng", "vanilla.r2", "ng.r2", "vanilla.r3", "ng.r3"]
    for it, (cfg, rep) in zip(items, [(c, r) for r in (1, 2, 3) for c in ("vanilla", "ng")]):
        assert it.get("config", it["name"]) == cfg and it.get("log_name", cfg) == cfg
        # one server start holds that repeat's cells, each recorded as isolated by a server start
        assert [(b["concurrency"], b["rep"]) for b in it["bench"]] == [(1, rep), (16, rep)]
        assert [b["result_file"] for b in it["bench"]] == [f"{cfg}_conc{c}_r{rep}.json" for c in (1, 16)]
        assert {metadata(it, k)["repeat_isolation"] for k in range(len(it["bench"]))} == {"server-start"}
        assert {metadata(it, k)["repeat"] for k in range(len(it["bench"]))} == {str(rep)}
    assert len({i["item_hash"] for i in items}) == len(items)
    # the printed plan: a `vllm serve` before each repeat
    lines = commands_for(p, "w1", "ng", PATHS)
    assert [shlex.split(line)[1] for line in lines] == ["serve", "bench", "bench"] * 3


def test_cache_reset_is_the_one_server_layout_and_keeps_the_hash_plans_had_before_the_field():
    shared = plan_of(repeat_isolation="cache-reset")
    items = build_run_spec(shared, "w1", ["vanilla", "ng"], PATHS).to_json()["items"]
    assert [i["name"] for i in items] == ["vanilla", "ng"]
    assert [(b["concurrency"], b["rep"]) for b in items[1]["bench"]] == [(c, r) for r in (1, 2, 3) for c in (1, 16)]
    assert {metadata(items[1], k)["repeat_isolation"] for k in range(len(items[1]["bench"]))} == {"cache-reset"}
    # cache-reset is how a plan without the field ran: it is not hashed, so such a plan keeps its hash;
    # server-start measures otherwise, so it is hashed
    assert "repeat_isolation" not in shared.canonical_json()
    assert plan_of().plan_hash() != shared.plan_hash()
    # one run per cell: nothing to isolate, neither hashed nor recorded
    single = [plan_of(repeat=1, repeat_isolation=how) for how in ("server-start", "cache-reset")]
    assert single[0].plan_hash() == single[1].plan_hash()
    items = build_run_spec(single[0], "w1", ["vanilla", "ng"], PATHS).to_json()["items"]
    assert [i["name"] for i in items] == ["vanilla", "ng"]
    assert all("repeat_isolation" not in metadata(i, k) and "repeat" not in metadata(i, k)
               for i in items for k in range(len(i["bench"])))


def test_gate_runs_add_the_baselines_gate_cell_and_leave_every_measured_item_as_it_was():
    for p in (plan_of(), plan_of(repeat_isolation="cache-reset"), plan_of(repeat=1)):
        before = build_run_spec(p, "w1", ["vanilla", "ng"], PATHS).to_json()["items"]
        after = build_run_spec(p, "w1", ["vanilla", "ng"], PATHS, gate_runs=p.benchmark.repeat + 2).to_json()["items"]
        assert after[:len(before)] == before     # same items, same hashes: nothing is measured again
        added = after[len(before):]
        reps = [p.benchmark.repeat + 1, p.benchmark.repeat + 2]
        assert [i["name"] for i in added] == [f"vanilla.r{k}" for k in reps]
        for it, k in zip(added, reps):
            assert it["config"] == "vanilla" and [b["concurrency"] for b in it["bench"]] == [16]
            assert it["bench"][0]["result_file"] == f"vanilla_conc16_r{k}.json"
            assert metadata(it)["repeat_isolation"] == "server-start" and metadata(it)["repeat"] == str(k)
        # a node whose queue has no baseline gets no gate runs; a count the plan already reaches adds none
        assert build_run_spec(p, "w1", ["ng"], PATHS, gate_runs=9).to_json()["items"] == \
            build_run_spec(p, "w1", ["ng"], PATHS).to_json()["items"]
        assert build_run_spec(p, "w1", ["vanilla"], PATHS, gate_runs=p.benchmark.repeat).to_json()["items"] == \
            build_run_spec(p, "w1", ["vanilla"], PATHS).to_json()["items"]


def test_runner_starts_a_server_per_repeat_and_a_later_gate_run_measures_only_the_new_runs(bed):
    plan = bed.plan(benchmark={"repeat": 2})
    assert bed.run(bed.spec(plan, queue=("vanilla", "ngram"))) == EXIT_OK, bed.log()
    st = bed.state()
    assert [i["name"] for i in st["items"]] == ["vanilla", "ngram", "vanilla.r2", "ngram.r2"]
    assert all(i["status"] == "done" for i in st["items"])
    # interleaved in time: vanilla r1 < ngram r1 < vanilla r2 < ngram r2
    starts = [i["started_at"] for i in st["items"]]
    assert starts == sorted(starts)
    for cfg in ("vanilla", "ngram"):
        assert (bed.run_dir / f"{cfg}.server.log").read_text().count("==== specfleet ") == 2
        assert not list(bed.run_dir.glob(f"{cfg}.r*.server.log"))
        for rep in (1, 2):
            res = json.loads((bed.run_dir / f"{cfg}_conc16_r{rep}.json").read_text())
            assert res["repeat_isolation"] == "server-start" and res["repeat"] == str(rep)
    measured = {f.name: f.stat().st_mtime_ns for f in bed.run_dir.glob("*_r[0-9].json")}  # results, not records
    # the gate was INCONCLUSIVE: two more runs of the baseline's gate cell (fab bench --gate-runs 4)
    spec = build_run_spec(plan, "w1", ["vanilla", "ngram"], Paths(venv=str(bed.venv), work_dir=str(bed.work)),
                          env_file=str(bed.env_file), run_id="test-run-2", gate_runs=4)
    (bed.tmp / "gate.json").write_text(dump_run_spec(spec))
    assert bed.run(bed.tmp / "gate.json") == EXIT_OK, bed.log()
    items = bed.items()
    assert [n for n, i in items.items() if i["phase"] == "done earlier"] == ["vanilla", "ngram", "vanilla.r2", "ngram.r2"]
    assert items["vanilla.r3"]["status"] == items["vanilla.r4"]["status"] == "done"
    assert {f.name: f.stat().st_mtime_ns for f in bed.run_dir.glob("*_r[12].json")} == measured
    for rep in (3, 4):
        res = json.loads((bed.run_dir / f"vanilla_conc16_r{rep}.json").read_text())
        assert res["repeat_isolation"] == "server-start" and res["max_concurrency"] == 16
    assert not (bed.run_dir / "vanilla_conc1_r3.json").exists() and not list(bed.run_dir.glob("ngram_*_r3.json"))
    assert (bed.run_dir / "vanilla.server.log").read_text().count("==== specfleet ") == 4
