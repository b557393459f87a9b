"""The typed run spec (specfleet/worker/runspec.py): JSON on the wire, argv rendered by the worker."""
import json
import shlex

import pytest

from specfleet.campaign import Paths, build_run_spec, commands_for, load_plan
from specfleet.worker.runspec import BenchRun, Dropped, Serve, item_parts
from tests.run_argv import rendered

PLAN = load_plan("plans/demo.yml")
PATHS = Paths(venv="/v", work_dir="/w", dataset="/w/q.jsonl")


def spec(**kw) -> dict:
    return json.loads(json.dumps(build_run_spec(PLAN, "w1", ["vanilla", "ngram"], PATHS, run_id="r", **kw)))


def test_the_printed_plan_is_what_the_worker_renders_from_the_spec():
    s, lines = spec(), []
    for it in s["items"]:   # one item per server start (repeat_isolation server-start: one per repeat)
        if it.get("config", it["name"]) == "ngram":
            serve, benches = rendered(s, it)
            lines += [shlex.join(serve), *map(shlex.join, benches)]
    assert lines == commands_for(PLAN, "w1", "ngram", PATHS)


def test_the_port_of_the_spec_reaches_the_server_and_the_client():
    s = {**spec(), "port": 8003}   # a GPU lane's or a Slurm step's port: no argv is edited
    serve, benches = rendered(s, s["items"][0])
    assert serve[serve.index("--port") + 1] == "8003"
    assert all(b[b.index("--base-url") + 1] == "http://127.0.0.1:8003" for b in benches)


def test_what_the_worker_knows_is_rendered_not_patched():
    s = spec()
    serve, client, runs = item_parts(s["items"][0])
    run = runs[0]
    argv = run.argv(client, model="/m/qwen", vllm_version="0.28.0", host="127.0.0.1", port=8000,
                    result_filename="x.json.partial", metadata=[["decoding", "greedy"]])
    assert argv[argv.index("--tokenizer") + 1] == "/m/qwen" and "vllm_version=0.28.0" in argv
    assert argv[argv.index("--result-filename") + 1] == "x.json.partial" and argv[-1] == "decoding=greedy"
    assert "--disable-shuffle" not in argv
    kept = BenchRun.from_json({**run.to_json(), "dropped": Dropped("/w/kept.jsonl", 7, 10, [3, 5, 9]).to_json()})
    argv = kept.argv(client, model="/m", vllm_version=None, host="h", port=1)
    assert argv[argv.index("--dataset-path") + 1] == "/w/kept.jsonl" and argv[argv.index("--num-prompts") + 1] == "7"
    assert argv.index("--disable-shuffle") < argv.index("--metadata")   # --metadata takes the rest of the line
    md = argv[argv.index("--metadata") + 1:]
    assert {"prompts_dropped=3", "prompts_dropped_ids=3,5,9", "prompts_selected=10", "vllm_version=@VLLM_VERSION@",
            f"prompts_per_concurrency={run.num_prompts / run.concurrency:g}"} <= set(md)
    assert serve.argv(model=None, host="h", port=1)[2] == "@MODEL@"


def test_a_bad_item_is_refused_by_name():
    item = spec()["items"][0]
    with pytest.raises(ValueError, match="Serve: unknown key\\(s\\) serve_argv"):
        item_parts({**item, "serve": {**item["serve"], "serve_argv": []}})
    with pytest.raises(ValueError, match="BenchRun: expected an object"):
        BenchRun.from_json(["--num-prompts", "8"])
    assert Serve.from_json(item["serve"]).to_json() == item["serve"]
