"""Plan validation, plan_hash, commands."""
import json
import shlex
import textwrap

import pytest
import yaml

from specfleet.campaign.commands import Paths, commands_for, item_spec
from specfleet.plan import PlanError, load_plan, parse_plan
from specfleet.campaign.spec import build_run_spec

MINI = textwrap.dedent("""\
    campaign: t
    model: {name: m, candidates: [/m/a, /m/b], weights_gib: 1}
    configurations:
      - {name: vanilla, speculative_config: null}
      - {name: ng, speculative_config: {method: ngram, num_speculative_tokens: 4, prompt_lookup_min: 2, prompt_lookup_max: 8}}
    baseline: vanilla
    benchmark: {dataset_path: /d/q.jsonl, chat_template: double}
    """)


def write(tmp_path, text, name="p.yml"):
    f = tmp_path / name
    f.write_text(text)
    return f


def err(tmp_path, text):
    with pytest.raises(PlanError) as e:
        load_plan(write(tmp_path, text))
    return str(e.value)


def test_repo_plans_load():
    p = load_plan("plans/qwen3-32b.yml")
    assert [c.name for c in p.configurations] == ["vanilla", "ngram", "ngram_improved", "eagle3"]
    assert p.config("ngram").speculative_config == {
        "method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_min": 4, "prompt_lookup_max": 6}
    assert p.config("ngram_improved").speculative_config["prompt_lookup_max"] == 128
    assert p.config("eagle3").speculative_config["num_speculative_tokens"] == 3
    assert p.benchmark.concurrencies == [1, 16] and p.benchmark.num_prompts == 16
    assert p.benchmark.output_len == 512
    d = load_plan("plans/demo.yml")
    assert d.model.candidates == ["/mnt/Qwen3-32B", "/mnt/fabrix/models/Qwen3-32B"]
    assert d.benchmark.dataset_path == "../datasets/sample/question.jsonl"


def test_defaults(tmp_path):
    p = load_plan(write(tmp_path, MINI))
    assert p.server.port == 8000 and p.server.health_timeout_s == 2400
    assert p.server.prefix_cache == "reset" and p.gpu_memory_free_mib == 5000
    assert p.benchmark.metric_percentiles == [50, 90, 99]


def test_yaml_syntax_error_has_line(tmp_path):
    m = err(tmp_path, MINI + "benchmark: [unclosed\n")
    assert "YAML syntax error at line" in m and "p.yml" in m


def test_duplicate_key(tmp_path):
    m = err(tmp_path, MINI + "baseline: ng\n")
    assert "duplicate key 'baseline'" in m and "line 8" in m


def test_unknown_field(tmp_path):
    m = err(tmp_path, MINI.replace("weights_gib: 1}", "weights_gib: 1, weigths: 2}"))
    assert "field 'model.weigths': unknown field" in m
    m = err(tmp_path, MINI.replace("{name: vanilla,", "{name: vanilla, bogus: 1,"))
    assert "configuration 'vanilla', field 'bogus': unknown field" in m


def test_baseline_missing(tmp_path):
    m = err(tmp_path, MINI.replace("baseline: vanilla", "baseline: nope"))
    assert "field 'baseline'" in m and "'nope' is not a configuration" in m


@pytest.mark.parametrize("bad, needle", [
    ("num_speculative_tokens: '4'", "num_speculative_tokens must be a positive integer"),
    ("num_speculative_tokens: true", "num_speculative_tokens must be a positive integer"),
    ("num_speculative_tokens: 4, prompt_lookup_min: 9", "larger than prompt_lookup_max"),
])
def test_bad_speculative_config(tmp_path, bad, needle):
    text = MINI.replace("num_speculative_tokens: 4, prompt_lookup_min: 2", bad + (", prompt_lookup_min: 2" if "min" not in bad else ""))
    m = err(tmp_path, text)
    assert "configuration 'ng', field 'speculative_config'" in m and needle in m


def test_eagle_needs_model_and_method_string(tmp_path):
    m = err(tmp_path, MINI.replace("{method: ngram, num_speculative_tokens: 4, prompt_lookup_min: 2, prompt_lookup_max: 8}",
                                   "{method: eagle3, num_speculative_tokens: 3}"))
    assert "eagle3 needs 'model'" in m
    m = err(tmp_path, MINI.replace("method: ngram", "method: 3"))
    assert "needs 'method'" in m
    m = err(tmp_path, MINI.replace("speculative_config: null", "speculative_config: [1]"))
    assert "configuration 'vanilla', field 'speculative_config'" in m


def test_owned_and_removed_flags(tmp_path):
    m = err(tmp_path, MINI + "server: {args: [--port, '9000']}\n")
    assert "server.port" in m
    m = err(tmp_path, MINI + "server: {args: --disable-log-requests}\n")
    assert "--no-enable-log-requests" in m


def test_chat_template_is_explicit_and_consistent(tmp_path):
    m = err(tmp_path, MINI.replace(", chat_template: double", ""))
    assert "benchmark.chat_template': is required" in m
    m = err(tmp_path, MINI.replace("chat_template: double", "chat_template: single"))
    # single on the chat backend: only under a pinned release whose client leaves the template to the server
    assert "field 'benchmark.chat_template': single: with backend openai-chat the prompts are templated once " \
        "only where" in m and "or use backend openai on /v1/completions" in m
    p = load_plan(write(tmp_path, MINI.replace(
        "chat_template: double", "chat_template: single, backend: openai, endpoint: /v1/completions")))
    assert p.benchmark.backend == "openai"


def test_plan_hash_stable_and_sensitive(tmp_path):
    a = load_plan(write(tmp_path, MINI, "a.yml"))
    # same content, other order and formatting
    raw = yaml.safe_load(MINI)
    b = parse_plan(dict(reversed(list(raw.items()))))
    assert a.plan_hash() == b.plan_hash() and len(a.plan_hash()) == 12
    c = load_plan(write(tmp_path, MINI.replace("prompt_lookup_max: 8", "prompt_lookup_max: 9"), "c.yml"))
    assert c.plan_hash() != a.plan_hash()
    d = load_plan(write(tmp_path, MINI.replace("/d/q.jsonl", "/d/r.jsonl"), "d.yml"))
    assert d.plan_hash() != a.plan_hash()


def test_commands_for_report_plan():
    p = load_plan("plans/qwen3-32b.yml")
    paths = Paths(venv="/vllm-venv", work_dir="/var/tmp/sf")
    lines = commands_for(p, "w2", "eagle3", paths)
    assert len(lines) == 1 + 2 * 1  # one server, one run (repeat: 1, as the report) of concurrency 1 and 16
    serve = shlex.split(lines[0])
    assert serve[:3] == ["/vllm-venv/bin/vllm", "serve", "@MODEL@"]
    sc = serve[serve.index("--speculative-config") + 1]
    assert sc == '{"method":"eagle3","model":"/mnt/fabrix/models/Qwen3-32B-speculator.eagle3","num_speculative_tokens":3}'
    assert "'{" in lines[0]  # the JSON is quoted for the shell
    for w in ("--max-model-len", "2048", "--gpu-memory-utilization", "0.95", "--no-enable-log-requests"):
        assert w in serve
    bench = shlex.split(lines[2])
    assert bench[bench.index("--tokenizer") + 1] == "@MODEL@"
    assert bench[bench.index("--max-concurrency") + 1] == "16"
    assert bench[bench.index("--result-filename") + 1] == "eagle3_conc16.json"
    assert bench[bench.index("--result-dir") + 1] == "/var/tmp/sf/qwen3-32b-specdec/w2"
    assert "--no-oversample" in bench and "--save-result" in bench and "--save-detailed" in bench
    md = bench[bench.index("--metadata") + 1:]
    assert md[:4] == ["node=w2", "config=eagle3", f"plan_hash={p.plan_hash()}", "vllm_version=0.28.0"]
    assert bench[bench.index("--percentile-metrics") + 1] == "ttft,tpot,itl,e2el"
    assert bench[bench.index("--metric-percentiles") + 1] == "50,90,99"


def test_run_spec_shape():
    p = load_plan("plans/demo.yml")
    spec = build_run_spec(p, "w1", ["vanilla", "ngram"], Paths(venv="/opt/v", work_dir="/w", dataset="/w/q.jsonl"))
    # a server start per repeat (repeat_isolation: server-start), the configurations interleaved
    assert spec.host == "w1" and [i.name for i in spec.items] == \
        ["vanilla", "ngram", "vanilla.r2", "ngram.r2", "vanilla.r3", "ngram.r3"]
    it = spec.items[3]
    assert [b.result_file for b in it.bench] == [f"ngram_conc{c}_r2.json" for c in (1, 16)]
    assert it.required_paths == ["/w/q.jsonl"] and it.configuration == "ngram"
    assert item_spec(p, "w1", "ngram", Paths(venv="/opt/v", work_dir="/w", dataset="/w/q.jsonl"),
                     rep=2).item_hash == it.item_hash


def test_unknown_speculative_key_is_refused_unless_the_plan_opts_in(tmp_path):
    typo = MINI.replace("num_speculative_tokens: 4,", "num_speculative_tokens: 4, num_spec_tokens: 4,")
    msg = err(tmp_path, typo)
    assert msg == (f"{tmp_path / 'p.yml'}: configuration 'ng', field 'speculative_config': unknown key(s) "
                   "'num_spec_tokens': a SpeculativeConfig field of no vLLM release in docs/vllm-releases.md (a newer "
                   "vLLM's key goes in speculative_extra_keys)")
    opted = typo.replace("{name: ng, ", "{name: ng, speculative_extra_keys: [num_spec_tokens], ")
    p = load_plan(write(tmp_path, opted, "ok.yml"))
    assert p.config("ng").speculative_config["num_spec_tokens"] == 4
    # the opt-in is validation only: it does not change the plan's identity
    assert "speculative_extra_keys" not in p.canonical_json()


def test_repeats_default_to_three_interleaved(tmp_path):
    p = load_plan(write(tmp_path, MINI))
    assert p.benchmark.repeat == 3
    it = item_spec(p, "w1", "ng", Paths(venv="/v", work_dir="/w"))
    assert [(b.concurrency, b.rep) for b in it.bench] == [(1, 1), (16, 1), (1, 2), (16, 2), (1, 3), (16, 3)]


def test_steady_state_needs_prompts_for_the_concurrency(tmp_path):
    m = err(tmp_path, MINI.replace("chat_template: double", "chat_template: double, num_prompts: 16"))
    assert "p.yml: field 'benchmark.num_prompts': 16 prompts at concurrency 16 is one wave" in m
    assert "raise num_prompts to 80" in m and "steady_state: report-setup" in m and "\n" not in m
    ok = load_plan(write(tmp_path, MINI.replace(
        "chat_template: double", "chat_template: double, num_prompts: 32, min_prompts_per_concurrency: 2")))
    assert ok.benchmark.num_prompts == 32
    rep = load_plan(write(tmp_path, MINI.replace(
        "chat_template: double", "chat_template: double, num_prompts: 16, steady_state: report-setup")))
    md = shlex.split(commands_for(rep, "w1", "ng", Paths(venv="/v", work_dir="/w"))[2])
    assert "steady_state=report-setup" in md and "prompts_per_concurrency=1" in md


def test_disable_log_stats_is_refused_for_a_speculative_configuration(tmp_path):
    m = err(tmp_path, MINI + "server: {args: [--disable-log-stats]}\n")
    assert m.startswith(f"{tmp_path / 'p.yml'}: configuration 'ng', field 'server.args': --disable-log-stats")
    assert "spec-decode counters" in m and "\n" not in m
    m = err(tmp_path, MINI.replace("prompt_lookup_max: 8}", "prompt_lookup_max: 8}, extra_args: [--disable-log-stats]"))
    assert "configuration 'ng', field 'extra_args'" in m
    # without speculation nothing is lost
    only = "".join(ln for ln in MINI.splitlines(keepends=True) if "name: ng," not in ln)
    assert load_plan(write(tmp_path, only + "server: {args: [--disable-log-stats]}\n")).server.args


def test_the_report_plan_runs_as_the_report_did_and_the_controlled_one_says_how_it_differs():
    rep, ctl = load_plan("plans/qwen3-32b.yml"), load_plan("plans/qwen3-32b-controlled.yml")
    paths = Paths(venv="/v", work_dir="/w")
    bench = shlex.split(commands_for(rep, "w1", "ngram", paths)[1])
    assert "--temperature" not in bench  # the report sent none: Qwen3's generation config sampled
    assert bench[bench.index("--num-warmups") + 1] == "0"
    assert rep.server.prefix_cache == "keep" and rep.benchmark.steady_state == "report-setup"
    assert (rep.benchmark.num_prompts, rep.benchmark.output_len, rep.benchmark.concurrencies) == (16, 512, [1, 16])
    assert "sampling_params={}" in bench and "prefix_cache=keep" in bench and "num_warmups=0" in bench
    cb = shlex.split(commands_for(ctl, "w1", "ngram", paths)[1])
    assert cb[cb.index("--temperature") + 1] == "0" and cb[cb.index("--num-warmups") + 1] == "1"
    assert ctl.server.prefix_cache == "reset" and ctl.benchmark.steady_state == "required"
    assert 'sampling_params={"temperature":0.0}' in cb
    text = open("plans/qwen3-32b-controlled.yml").read()
    for deviation in ("temperature 0 (greedy)", "num_warmups 1", "prefix_cache reset", "num_prompts 80"):
        assert deviation in text
    assert [c.model_dump() for c in ctl.configurations] == [c.model_dump() for c in rep.configurations]


def test_run_spec_carries_the_fit_check_and_the_tolerance(tmp_path):
    p = load_plan(write(tmp_path, MINI.replace("chat_template: double", "chat_template: double, max_failed_requests: 1")
                        + "server: {args: [--max-model-len, 2k]}\n"))
    it = item_spec(p, "w1", "ng", Paths(venv="/v", work_dir="/w", dataset="/w/q.jsonl"))
    # the flag in args is read once into the typed field (2k: vLLM's x1000), which the fit check gets
    assert p.server.max_model_len == 2000 and "--max-model-len" not in p.server.args
    assert it.to_json()["fit"] == {"dataset": "/w/q.jsonl", "num_prompts": 80, "output_len": 512,
                                   "max_model_len": 2000, "chat_template": "double", "policy": "refuse"}
    assert it.max_failed_requests == 1 and all(b.num_prompts == 80 for b in it.bench)


def test_the_engine_fields_are_typed_rendered_once_and_given_once(tmp_path):
    """--max-model-len, the parallel sizes and --generation-config are plan fields: a flag in args is read
    once into the field (the plan hash reads args as written), the field is rendered once, both at once
    is refused naming the field."""
    paths = Paths(venv="/v", work_dir="/w", dataset="/w/q.jsonl")
    typed = load_plan(write(tmp_path, MINI + "server: {max_model_len: 4096, args: [--enforce-eager]}\n", "t.yml"))
    raw = load_plan(write(tmp_path, MINI + "server: {args: [--max-model-len, '4096', --enforce-eager]}\n", "r.yml"))
    for p in (typed, raw):
        serve = shlex.split(commands_for(p, "w1", "ng", paths)[0])
        assert serve.count("--max-model-len") == 1 and serve[serve.index("--max-model-len") + 1] == "4096"
        assert p.server.max_model_len == 4096 and p.server.args == ["--enforce-eager"]
        assert item_spec(p, "w1", "ng", paths).fit.max_model_len == 4096
    assert json.loads(raw.canonical_json())["server"]["args"] == ["--max-model-len", "4096", "--enforce-eager"]
    assert "max_model_len" not in json.loads(raw.canonical_json())["server"]
    msg = err(tmp_path, MINI + "server: {max_model_len: 4096, args: [--max_model_len=2048]}\n")
    assert msg == (f"{tmp_path / 'p.yml'}: field 'server.max_model_len': also given as --max-model-len in args; "
                   "give it once (the field max_model_len, or the flag)")
    msg = err(tmp_path, MINI + "server: {max_model_len: lots}\n")
    assert msg.startswith(f"{tmp_path / 'p.yml'}: field 'server.max_model_len': 'lots' is not a positive integer")
    # a configuration's field over the server's; its flags likewise
    cfg = load_plan(write(tmp_path, MINI.replace("{name: ng, ", "{name: ng, generation_config: vllm, "
                                                 "extra_args: [-tp, '2'], ") + "server: {tensor_parallel_size: 4}\n",
                          "c.yml"))
    serve = item_spec(cfg, "w1", "ng", paths).serve
    assert (serve.tensor_parallel_size, serve.generation_config, serve.gpus_needed()) == (2, "vllm", 2)
    assert item_spec(cfg, "w1", "vanilla", paths).serve.gpus_needed() == 4
