"""The typed run spec (specfleet/worker/runspec.py): JSON on the wire, argv rendered by the worker."""
import json
import shlex

import pytest

from specfleet.campaign import Paths, build_run_spec, commands_for, load_plan
from specfleet.worker.runspec import SPEC_SCHEMA, BenchRun, Dropped, Item, RunSpec, Serve, SpecError
from tests.run_argv import rendered

PLAN = load_plan("plans/demo.yml")
PATHS = Paths(venv="/v", work_dir="/w", dataset="/w/q.jsonl")


def spec(**kw) -> dict:
    return json.loads(json.dumps(build_run_spec(PLAN, "w1", ["vanilla", "ngram"], PATHS, run_id="r", **kw).to_json()))


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
    item = Item.from_json(s["items"][0])
    serve, client, run = item.serve, item.client, item.bench[0]
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
    with pytest.raises(SpecError, match="^field 'serve': unknown key\\(s\\) serve_argv$"):
        Item.from_json({**item, "serve": {**item["serve"], "serve_argv": []}})
    with pytest.raises(SpecError, match="^BenchRun: expected an object, got list$"):
        BenchRun.from_json(["--num-prompts", "8"])
    assert Serve.from_json(item["serve"]).to_json() == item["serve"]
    assert Item.from_json(item).to_json() == item


def test_the_whole_spec_is_parsed_once_and_written_back_as_it_came():
    s = spec()
    parsed = RunSpec.from_json(s)
    assert parsed.to_json() == s and parsed.items[0].client.repeats == PLAN.benchmark.repeat
    assert s["schema"] == SPEC_SCHEMA


@pytest.mark.parametrize("path, value, said", [
    (("port",), "8000", "field 'port': expected an integer, got \"8000\""),
    (("items", 1, "client", "repeats"), True, "field 'items[1].client.repeats': expected an integer, got true"),
    (("items", 0, "bench", 0, "concurrency"), 0, "field 'items[0].bench[0].concurrency': must be at least 1, not 0"),
    (("items", 0, "serve", "tensor_parallel_size"), "2", "field 'items[0].serve.tensor_parallel_size': expected an "
                                                         "integer, got \"2\""),
    (("items", 0, "fit", "max_model_len"), 0, "field 'items[0].fit' "),   # a typed fit, not a dict read by key
    (("schema",), 1, "field 'schema': 1 is not 2: a run spec of another specfleet (run `fab bench` again"),
    (("items", 0, "max_failed_requests"), None, "field 'items[0].max_failed_requests': expected an integer"),
])
def test_a_bad_field_is_named_in_one_line(path, value, said):
    s = spec()
    d = s
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    if path[-1] == "max_model_len":   # a fit's own rule: the field is typed (int or None), a zero is refused
        d[path[-1]] = "4096"
        said = "field 'items[0].fit.max_model_len': expected an integer, got \"4096\""
    with pytest.raises(SpecError) as e:
        RunSpec.from_json(s)
    assert str(e.value).startswith(said) and "\n" not in str(e.value), str(e.value)


def test_a_missing_envelope_field_is_named():
    s = spec()
    del s["stop_timeout_s"]
    with pytest.raises(SpecError, match="^field 'stop_timeout_s': missing$"):
        RunSpec.from_json(s)
    s = spec()
    del s["items"][1]["client"]
    with pytest.raises(SpecError, match="^field 'items\\[1\\].client': missing$"):
        RunSpec.from_json(s)


def test_the_engine_fields_are_rendered_once_by_the_one_renderer():
    serve = Serve(vllm="v", served_name="b", server_args=["--gpu-memory-utilization", "0.9"], max_model_len=4096,
                  tensor_parallel_size=2, generation_config="vllm", extra_args=["--enforce-eager"])
    argv = serve.argv(model="/m", host="h", port=1)
    assert argv[9:] == ["--gpu-memory-utilization", "0.9", "--max-model-len", "4096", "--tensor-parallel-size", "2",
                        "--generation-config", "vllm", "--enforce-eager"]
    assert serve.gpus_needed() == 2 and serve.sampling_source() == "vllm"
    assert Serve(vllm="v", served_name="b", server_args=[]).sampling_source() == "auto"
    assert Serve(vllm="v", served_name="b", server_args=[], tensor_parallel_size=2, pipeline_parallel_size=2,
                 data_parallel_size=2).gpus_needed() == 8


def test_the_argv_scanner_is_gone():
    import specfleet.worker.slots as slots
    assert not hasattr(slots, "flag_values") and not hasattr(slots, "parallel_sizes")
