import json

import pytest

from specfleet.resultfile.schema import ResultError, load_result, parse_result

from campaign_builder import FIXTURES


def test_real_vanilla_file_parses():
    r = load_result(FIXTURES / "vanilla_conc1.json")
    assert r.completed == 8 and r.max_concurrency == 1
    assert r.request_rate == float("inf")  # written as the string "inf"
    assert r.output_throughput == pytest.approx(490.38400591338785)
    assert not r.has_spec and not r.has_detail and not r.simulated


def test_real_sampled_ngram_file_has_no_spec_keys():
    r = load_result(FIXTURES / "ngram_conc4_sampled.json")
    assert r.spec_decode_num_drafts is None and r.spec_decode_acceptance_rate is None
    assert not r.has_spec


def test_real_greedy_detailed_ngram_file_has_spec_keys_and_arrays():
    r = load_result(FIXTURES / "ngram_conc4_greedy_detailed.json")
    assert r.has_spec and r.has_detail
    assert r.spec_decode_num_drafts == 160
    assert r.spec_decode_acceptance_rate == 100.0
    assert r.spec_decode_acceptance_length == 3.0
    assert len(r.ttfts) == len(r.output_lens) == len(r.itls) == 8


def _data():
    return json.loads((FIXTURES / "vanilla_conc1.json").read_text())


def test_truncated_file_names_file_and_problem(tmp_path):
    p = tmp_path / "vanilla_conc1.json"
    p.write_text((FIXTURES / "vanilla_conc1.json").read_text()[:300])
    with pytest.raises(ResultError) as e:
        load_result(p)
    assert str(p) in str(e.value) and "invalid JSON" in str(e.value)


def test_missing_required_keys_are_named(tmp_path):
    d = _data()
    del d["mean_itl_ms"], d["duration"]
    p = tmp_path / "x_conc1.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ResultError, match=r"missing required key\(s\): duration, mean_itl_ms"):
        load_result(p)


def test_completed_zero_is_refused(tmp_path):
    d = _data()
    d["completed"] = 0
    p = tmp_path / "x_conc1.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ResultError, match="completed == 0"):
        load_result(p)


def test_wrong_type_is_reported():
    d = _data()
    d["output_throughput"] = "fast"
    with pytest.raises(ResultError, match="output_throughput"):
        parse_result(d, "f.json")


def test_older_version_without_optional_keys_and_with_metadata():
    d = _data()
    for k in ("failed", "latencies", "queue_times", "rtfx", "max_output_tokens_per_s",
              "max_concurrent_requests"):
        del d[k]
    d.update(request_rate=2.5, node="w1", config="vanilla", vllm_version="0.11.0", plan_hash="h1",
             simulated=True, engine="specfleet-simvllm", simulated_time_scale=0.01)
    r = parse_result(d)
    assert r.failed is None and r.latencies is None and r.request_rate == 2.5
    assert r.simulated
    assert r.metadata() == {"node": "w1", "config": "vanilla", "vllm_version": "0.11.0",
                            "plan_hash": "h1", "engine": "specfleet-simvllm"}
    assert r.extra["simulated_time_scale"] == 0.01


def test_not_an_object(tmp_path):
    p = tmp_path / "a_conc1.json"
    p.write_text("[1, 2]")
    with pytest.raises(ResultError, match="expected a JSON object"):
        load_result(p)


def test_a_dataset_smaller_than_the_plans_num_prompts_is_said_not_called_failures():
    """Issue 39: a 16-prompt file under an 80-prompt plan read "64 of 80 requests failed or were not
    sent ... no cause recorded"; the client made 16 requests, all completed: the dataset had 16."""
    from specfleet.resultfile.schema import Result, incomplete
    base = dict(duration=10.0, output_throughput=100.0, total_token_throughput=120.0, mean_ttft_ms=10.0,
                mean_tpot_ms=5.0, mean_itl_ms=5.0, num_prompts=80)
    why = incomplete(Result(**base, completed=16, failed=0, errors=[""] * 16), asked=80)
    assert why.startswith("64 of 80 requests were never sent: the client made 16 (completed 16)")
    assert "the dataset had 16 prompts for this run where the plan asks 80" in why and "failed" not in why
    # failed known, no errors array (vLLM >= 0.30 without --save-detailed): the same
    assert "were never sent" in incomplete(Result(**base, completed=16, failed=0), asked=80)
    # the run itself asked for 16 (vLLM records the CLI's --num-prompts): said so, not the dataset
    assert "the run asked for 16 (its num_prompts" in incomplete(Result(**dict(base, num_prompts=16), completed=16,
                                                                       failed=0), asked=80)
    # real failures beyond the plan's allowance are still failures, with their cause
    why = incomplete(Result(**base, completed=10, failed=6, errors=[""] * 10 + ["timeout"] * 6), asked=16)
    assert why.startswith("6 of 16 requests failed or were not sent") and "timeout" in why
    # no `failed` key and no errors (older vLLM): which it was is not known, said as before
    assert "failed or were not sent" in incomplete(Result(**base, completed=12), asked=16)
