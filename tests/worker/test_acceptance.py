"""Per-request acceptance (specfleet/worker/acceptance.py): the response parser, the prompt sets, the
release rule of the client template, and the untimed pass against the simulated vLLM."""
import json

import pytest

from specfleet.worker import acceptance, layout
from specfleet.worker.acceptance import client_templates, parse_metrics, prompt_set
from tests.worker import test_runner_simvllm as _sim

simvenv, simbed, sim_fault = _sim.simvenv, _sim.simbed, _sim.sim_fault  # its fixtures, shared

SPEC = {"mean_acceptance_length": 2.5, "draft_acceptance_rate": 0.5, "acceptance_histogram": [1, 0, 2, 1],
        "num_spec_steps": 4, "num_accepted_draft_tokens": 7, "num_draft_tokens": 12, "num_spec_tokens": 3}


def test_parse_metrics_reads_vllms_shape():
    got = parse_metrics({"choices": [], "metrics": {"time_to_first_token_ms": 3.0, "speculative_decoding": SPEC}})
    assert got == {**SPEC, "mean_acceptance_length": 2.5, "draft_acceptance_rate": 0.5}
    # per_step_* of `detailed` are not kept (the report reads the summary)
    assert "per_step_accepted" not in parse_metrics({"metrics": {"speculative_decoding": {
        **SPEC, "per_step_accepted": [0, 2, 2, 3], "per_step_drafted": [3, 3, 3, 3]}}})


def test_parse_metrics_absent_is_none_not_zero():
    assert parse_metrics({"choices": []}) is None
    assert parse_metrics({"metrics": None}) is None
    assert parse_metrics({"metrics": {"speculative_decoding": None}}) is None  # n > 1, or the flag off


def test_parse_metrics_sparse_histogram_is_made_dense():
    got = parse_metrics({"metrics": {"speculative_decoding": {**SPEC, "acceptance_histogram": {"0": 1, "3": 2}}}})
    assert got["acceptance_histogram"] == [1, 0, 0, 2]


@pytest.mark.parametrize("field,value", [("num_spec_steps", -1), ("num_draft_tokens", 1.5), ("num_spec_tokens", True),
                                         ("mean_acceptance_length", "2"), ("draft_acceptance_rate", float("nan")),
                                         ("acceptance_histogram", [1, -2]), ("acceptance_histogram", "1,2")])
def test_parse_metrics_refuses_a_malformed_field_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        parse_metrics({"metrics": {"speculative_decoding": {**SPEC, field: value}}})


def test_client_template_follows_the_release():
    assert client_templates("0.33.0", "openai-chat") and client_templates("0.28.0+cpu", "openai-chat")
    assert not client_templates("0.34.0", "openai-chat")
    assert client_templates("0.34.0", "openai")           # the completions backend templates on the client
    assert client_templates("simvllm 1.0 (simulated vLLM)", "openai-chat")  # no release: as up to 0.33


def test_prompt_set_groups_cells_by_their_prompts():
    bench = [{"concurrency": 1, "rep": 1, "num_prompts": 16, "output_len": 64},
             {"concurrency": 16, "rep": 1, "num_prompts": 80, "output_len": 64},
             {"concurrency": 16, "rep": 2, "num_prompts": 80, "output_len": 64},   # a repeat: the same prompts
             {"concurrency": 100, "rep": 1, "num_prompts": 500, "output_len": 64, "cell": "conc100-cat_rag",
              "category": "rag"},
             {"concurrency": 4, "rep": 1, "num_prompts": 10, "output_len": 64, "cell": "conc4-n10",
              "dropped": {"kept_file": "/r/prompts-fit-x.jsonl", "kept": 7, "selected": 10, "ids": [1, 2, 3]}}]
    sets = prompt_set({"bench": bench})
    assert [(s["cells"], s["prompts"], s["concurrency"]) for s in sets] == [
        ({"conc1": 16, "conc16": 80}, 80, 16),
        ({"conc100-cat_rag": 500}, 500, acceptance.MAX_CONCURRENCY),
        ({"conc4-n10": 7}, 7, 4)]
    assert sets[1]["category"] == "rag" and sets[2]["kept_file"] == "/r/prompts-fit-x.jsonl"


def test_acceptance_file_is_collected_with_the_results():
    from specfleet.collect.fetch import wanted
    name = layout.acceptance_file("ngram", "conc16-out128")
    assert name == "ngram_conc16-out128.acceptance.json" and wanted(name, ["ngram"])
    assert not wanted(name, ["vanilla"])


def test_untimed_pass_against_simvllm(simbed):
    """A speculative server started with the flag answers each request with its own acceptance; the
    runner writes one file per cell, the vanilla server gets no flag and no file."""
    sim_fault(simbed, None)
    plan = simbed.plan(benchmark={"spec_decode_metrics": "per_request", "output_len": 64})
    rc = simbed.run(simbed.spec(plan, queue=["vanilla", "ngram", "eagle3"]), timeout=300)
    assert rc == 0, simbed.log()
    assert not list(simbed.run_dir.glob("vanilla_*.acceptance.json"))
    serve = (simbed.run_dir / "ngram.server.log").read_text()
    assert "--per-request-spec-decode-metrics summary" in serve
    for cfg, k in (("ngram", 4), ("eagle3", 3)):
        for cell in ("conc1", "conc16"):
            doc = json.loads((simbed.run_dir / layout.acceptance_file(cfg, cell)).read_text())
            assert doc["untimed"] is True and doc["not_recorded"] is None and doc["level"] == "summary"
            assert doc["pass"]["prompts"] == 16 and doc["pass"]["concurrency"] == 16
            reqs = doc["requests"]
            assert len(reqs) == 16 and [r["index"] for r in reqs] == list(range(16))
            for r in reqs:
                assert r["num_spec_tokens"] == k and len(r["acceptance_histogram"]) == k + 1
                assert sum(r["acceptance_histogram"]) == r["num_spec_steps"]
                assert r["num_accepted_draft_tokens"] == sum(j * n for j, n in enumerate(r["acceptance_histogram"]))
                if r["num_spec_steps"]:
                    assert r["mean_acceptance_length"] == pytest.approx(
                        1 + r["num_accepted_draft_tokens"] / r["num_spec_steps"])
        # EAGLE-3 drafts every step: each request has steps; the requests differ (drawn per step)
    eagle = json.loads((simbed.run_dir / layout.acceptance_file("eagle3", "conc16")).read_text())["requests"]
    assert all(r["num_spec_steps"] > 0 for r in eagle)
    assert len({r["mean_acceptance_length"] for r in eagle}) > 1


# ---------------------------------------------------------------- the plan field and its release check
def _plan(metrics: str | None = None, pin: str | None = None):
    from tests.worker.test_vllm_releases import plan_with
    raw = plan_with({"name": "ngram", "speculative_config": {"method": "ngram", "num_speculative_tokens": 4,
                                                             "prompt_lookup_min": 2, "prompt_lookup_max": 8}},
                    **({"vllm_version": pin} if pin else {}))
    if metrics:
        raw["benchmark"]["spec_decode_metrics"] = metrics
    return raw


def test_per_request_under_a_release_without_the_flag_is_refused_naming_it():
    from specfleet.plan import PlanError, parse_plan
    with pytest.raises(PlanError) as e:
        parse_plan(_plan("per_request", "0.28.0"), "p.yml")
    assert str(e.value) == ("p.yml: configuration 'ngram', field 'benchmark.spec_decode_metrics': per_request: vLLM "
                            "0.28.0 has no --per-request-spec-decode-metrics (per-request acceptance came in vLLM 0.29) "
                            "(docs/vllm-releases.md, read from its wheel)")
    parse_plan(_plan("per_request", "0.30.0"), "p.yml")
    parse_plan(_plan(None, "0.28.0"), "p.yml")   # not asked: nothing to refuse


def test_per_request_renders_the_flag_for_speculative_servers_only_and_the_worker_refuses_old_releases():
    from specfleet.campaign.commands import Paths, item_spec, serve_argv
    from specfleet.plan import parse_plan
    plan = parse_plan(_plan("per_request"), "p.yml")
    paths = Paths(venv="/v", work_dir="/w")
    assert serve_argv(plan, "ngram", paths)[-2:] == ["--per-request-spec-decode-metrics", "summary"]
    assert "--per-request-spec-decode-metrics" not in serve_argv(plan, "vanilla", paths)
    # unpinned: the worker refuses the item under the release its venv reports, before any server starts
    # (0.34 refuses every item of this chat_template: double plan for its template: not this test's matter)
    item = item_spec(plan, "w1", "ngram", paths)
    assert item.serve.per_request_spec_decode_metrics == "summary"   # typed: the worker never reads an argv back
    assert {v for v, why in item.release_refusals.items() if "spec_decode_metrics" in why} == {"0.26.0", "0.28.0"}
    assert not [why for why in (item_spec(plan, "w1", "vanilla", paths).release_refusals or {}).values()
                if "spec_decode_metrics" in why]


def test_counters_keeps_the_plan_hash_per_request_changes_it():
    from specfleet.plan import parse_plan
    before = parse_plan(_plan(None), "p.yml").plan_hash()
    assert parse_plan(_plan("counters"), "p.yml").plan_hash() == before
    assert parse_plan(_plan("per_request"), "p.yml").plan_hash() != before


def test_a_pass_whose_requests_fail_does_not_fail_the_item(bed):
    """The fake server answers 404 to every completion: the timed results stand, the item is done, and
    each request of the cell's file names what the server said."""
    plan = bed.plan(benchmark={"spec_decode_metrics": "per_request"})
    rc = bed.run(bed.spec(plan, queue=["vanilla", "ngram"]))
    assert rc == 0, bed.log()
    assert {n: i["status"] for n, i in bed.items().items()} == {"vanilla": "done", "ngram": "done"}
    assert (bed.run_dir / "ngram_conc16.json").is_file()
    doc = json.loads((bed.run_dir / layout.acceptance_file("ngram", "conc16")).read_text())
    assert len(doc["requests"]) == 16 and all(r["error"].startswith("HTTP 404") for r in doc["requests"])


def test_acceptance_files_pass_collects_size_rule():
    from specfleet.collect.untrusted import MB, Limits, refusal
    name, limits = layout.acceptance_file("eagle3", "conc16"), Limits.default()
    assert refusal(name, "f", 1, 1000, limits) is None
    assert "collect.max_result_mb" in refusal(name, "f", 1, limits.result_bytes + MB, limits)
    assert "symbolic link" in refusal(name, "l", 1, 10, limits)


def test_a_pass_that_cannot_run_says_why_and_the_item_stays_done(bed):
    """The venv's python fails the pass (as a broken tokenizer would): the item is done, its results stand,
    and each cell's file and the item's notes say why there is no per-request acceptance."""
    py = bed.venv / "bin" / "python"
    py.write_text('#!/bin/sh\ncase " $* " in *" acceptance "*) echo "no tokenizer here" >&2; exit 3;; esac\n'
                  + py.read_text().split("\n", 1)[1])
    plan = bed.plan(benchmark={"spec_decode_metrics": "per_request"})
    rc = bed.run(bed.spec(plan, queue=["vanilla", "ngram"]))
    assert rc == 0, bed.log()
    item = bed.items()["ngram"]
    assert item["status"] == "done" and (bed.run_dir / "ngram_conc1.json").is_file()
    for cell in ("conc1", "conc16"):
        doc = json.loads((bed.run_dir / layout.acceptance_file("ngram", cell)).read_text())
        assert doc["requests"] == [] and "exited with code 3" in doc["not_recorded"]
        assert "no tokenizer here" in doc["not_recorded"]
    assert any("per-request acceptance not recorded for conc1, conc16" in n for n in item["notes"])
