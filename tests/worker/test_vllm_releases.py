"""A plan checked against the vLLM release it runs on (specfleet/plan/releases.py, the matrix read from
each release's wheel by scripts/vllm-matrix): refused at plan time under a pin, on the worker under the
version its venv reports, in one line naming the field, the value and the release."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace
from pathlib import Path

import pytest
import yaml

from specfleet.campaign.commands import Paths, item_spec
from specfleet.campaign.spec import build_run_spec
from specfleet.plan import PlanError, parse_plan
from specfleet.plan.releases import known_methods, not_checked, plan_problems, release_of, releases
from specfleet.worker.runner import EXIT_FAILED
from tests.worker.test_engine_version import _venv_of_a_real_vllm
from tests.run_argv import rendered

PROJECT = Path(__file__).resolve().parents[2]
PLANS = sorted((PROJECT / "plans").glob("*.yml")) + [PROJECT / "tests" / "docs" / "plans" / "tiny.yml"]
MINI = {"campaign": "t", "model": {"name": "m", "candidates": ["/m/a"], "weights_gib": 1},
        "configurations": [{"name": "vanilla", "speculative_config": None}], "baseline": "vanilla",
        "benchmark": {"dataset_path": "/d/q.jsonl", "chat_template": "double"}}


def plan_with(config: dict | None = None, **top) -> dict:
    raw = json.loads(json.dumps(MINI))
    if config:
        raw["configurations"].append(config)
    raw.update(top)
    return raw


def refused(raw: dict) -> str:
    with pytest.raises(PlanError) as e:
        parse_plan(raw, "p.yml")
    return str(e.value)


def test_the_matrix_holds_the_supported_releases_read_from_their_wheels():
    assert {"0.26.0", "0.28.0", "0.30.0", "0.32.0", "0.33.0", "0.34.0"} <= set(releases())
    doc = json.loads((PROJECT / "specfleet/plan/vllm_releases.json").read_text())
    assert doc["generated_by"] == "scripts/vllm-matrix" and doc["not_read"] == {}
    assert all(r["wheel"].endswith(".whl") for r in doc["releases"].values())
    assert release_of("0.32.0+cpu").version == "0.32.0" and release_of("simvllm 1.0 (simulated vLLM)") is None


def test_medusa_under_0_33_is_refused_naming_field_value_and_release():
    raw = plan_with({"name": "med", "speculative_config": {"method": "medusa", "model": "/d/med",
                                                           "num_speculative_tokens": 3}}, vllm_version="0.33.0")
    assert refused(raw) == ("p.yml: configuration 'med', field 'speculative_config.method': medusa: vLLM 0.33.0 "
                            "has no such speculative method (docs/vllm-releases.md, read from its wheel)")
    raw["vllm_version"] = "0.32.0"   # still there in 0.32
    parse_plan(raw, "p.yml")


def test_disable_padded_drafter_batch_under_0_34_is_refused():
    raw = plan_with({"name": "e3", "speculative_config": {"method": "eagle3", "model": "/d/e3", "num_speculative_tokens": 3,
                                                          "disable_padded_drafter_batch": True}}, vllm_version="0.34.0")
    raw["benchmark"]["chat_template"] = "single"   # 0.34's client leaves the chat template to the server
    assert refused(raw) == ("p.yml: configuration 'e3', field 'speculative_config.disable_padded_drafter_batch': "
                            "disable_padded_drafter_batch: vLLM 0.34.0 has no such speculative-config key "
                            "(docs/vllm-releases.md, read from its wheel)")
    raw["vllm_version"], raw["benchmark"]["chat_template"] = "0.33.0", "double"
    parse_plan(raw, "p.yml")


def test_dflash_under_0_28_is_not_refused_for_its_method():
    raw = plan_with({"name": "df", "speculative_config": {"method": "dflash", "model": "/d/df",
                                                          "num_speculative_tokens": 4}}, vllm_version="0.28.0")
    assert parse_plan(raw, "p.yml").config("df").method == "dflash"
    raw["configurations"][1]["speculative_config"]["method"] = "qwen3_5_mtp"  # refused before the matrix
    parse_plan(raw, "p.yml")


def test_a_flag_or_dataset_the_release_lacks_is_refused():
    raw = plan_with(vllm_version="0.26.0", server={"args": ["--per-request-spec-decode-metrics", "summary"]})
    assert refused(raw).startswith("p.yml: field 'server.args': --per-request-spec-decode-metrics: vLLM 0.26.0 "
                                   "has no such vllm serve flag")
    raw["vllm_version"] = "0.33.0"
    parse_plan(raw, "p.yml")
    # underscores and a short flag with its value attached are the flags vLLM reads
    ok = plan_with(vllm_version="0.26.0", server={"args": ["--max_model_len=4096", "-tp", "1", "-O3",
                                                          "--compilation-config.mode", "3"]})
    parse_plan(ok, "p.yml")


def test_a_method_or_key_no_release_has_needs_the_opt_in_and_is_reported():
    sc = {"method": "dflash9", "model": "/d/x", "num_speculative_tokens": 2, "xfuture_key": 1}
    msg = refused(plan_with({"name": "x", "speculative_config": sc}))
    assert "unknown key(s) 'xfuture_key'" in msg
    msg = refused(plan_with({"name": "x", "speculative_extra_keys": ["xfuture_key"], "speculative_config": sc}))
    assert msg == ("p.yml: configuration 'x', field 'speculative_config': unknown method 'dflash9': a method of no "
                   "vLLM release in docs/vllm-releases.md (a newer vLLM's method goes in speculative_extra_methods)")
    plan = parse_plan(plan_with({"name": "x", "speculative_extra_keys": ["xfuture_key"],
                                 "speculative_extra_methods": ["dflash9"], "speculative_config": sc},
                                vllm_version="0.34.0", benchmark=dict(MINI["benchmark"], chat_template="single")),
                      "p.yml")
    assert "speculative_extra_methods" not in plan.canonical_json()
    assert not_checked(plan) == [
        "configuration 'x': speculative method 'dflash9' is in no vLLM release of the matrix (opted in by "
        "speculative_extra_methods): not checked against the release",
        "configuration 'x': speculative-config key(s) xfuture_key in no vLLM release of the matrix (opted in by "
        "speculative_extra_keys): not checked against the release"]


def test_the_matrix_is_the_one_list_of_methods():
    assert {"ngram", "eagle3", "medusa", "dflash", "qwen3_5_mtp", "suffix"} <= known_methods()


@pytest.mark.parametrize("plan_file", PLANS, ids=[p.name for p in PLANS])
@pytest.mark.parametrize("version", sorted(releases()))
def test_every_shipped_plan_renders_for_every_release(plan_file, version):
    """Each shipped plan's every item renders (vllm serve and vllm bench serve) with flags, keys, a
    method and a dataset the release has, or the matrix refuses it for that release."""
    rel = releases()[version]
    raw = yaml.safe_load(plan_file.read_text())
    raw["vllm_version"] = version
    b = raw["benchmark"]
    b["chat_template"] = rel.chat_template(b.get("backend", "openai-chat"))  # what a plan for the release says
    plan = parse_plan(raw, plan_file)
    assert plan_problems(plan, rel) == {}
    paths = Paths(venv="/opt/v", work_dir="/w", dataset="/w/q.jsonl")
    spec = build_run_spec(plan, "w1", [c.name for c in plan.configurations], paths)
    for item in spec.items:
        serve, benches = rendered(spec, item, model="/m", vllm_version=version)
        flags = {w.split("=", 1)[0] for w in serve if w.startswith("--")}
        assert flags <= rel.serve_flags, (item.name, flags - rel.serve_flags)
        sc = item.serve.speculative_config or {}
        assert set(sc) <= rel.speculative_keys and (not sc or sc["method"] in rel.methods)
        for argv in benches:
            words = argv[argv.index("serve") + 1:]
            flags = {w for w in words if w.startswith("--")}
            assert flags <= rel.bench_flags, (item.name, flags - rel.bench_flags)
            assert words[words.index("--dataset-name") + 1] in rel.datasets


def test_the_item_carries_each_refusing_release_and_keeps_its_hash():
    raw = plan_with({"name": "med", "speculative_config": {"method": "medusa", "model": "/d/med",
                                                           "num_speculative_tokens": 3}})
    # on /v1/completions every release templates once, on the client: no release refuses the template
    raw["benchmark"].update(backend="openai", endpoint="/v1/completions", chat_template="single")
    plan = parse_plan(raw, "p.yml")
    paths = Paths(venv="/opt/v", work_dir="/w")
    it = item_spec(plan, "w1", "med", paths)
    assert set(it.release_refusals) == {"0.33.0", "0.34.0"}
    assert it.item_hash and "release_refusals" not in item_spec(plan, "w1", "vanilla", paths).to_json()


def test_the_worker_refuses_under_the_release_its_venv_reports_before_a_server_starts(bed, tmp_path):
    _venv_of_a_real_vllm(bed, tmp_path, version="0.33.0")
    plan = bed.plan()
    plan.configurations[2].speculative_config = {"method": "medusa", "model": str(bed.model),
                                                 "num_speculative_tokens": 3}
    path = bed.spec(plan, queue=["eagle3"])
    spec = json.loads(path.read_text())
    spec["items"][0].pop("fit", None)
    path.write_text(json.dumps(spec))
    assert bed.run(path) == EXIT_FAILED
    err = bed.items()["eagle3"]["error"]
    assert err == ("<plan>: configuration 'eagle3', field 'speculative_config.method': medusa: vLLM 0.33.0 has no "
                   "such speculative method (docs/vllm-releases.md, read from its wheel) (the venv reports vLLM "
                   "0.33.0; nothing was started)")
    assert not (bed.run_dir / "eagle3.server.log").exists()   # no server was started


def test_the_chat_template_a_release_cannot_do_is_refused_naming_field_value_and_release():
    """0.34 leaves the openai-chat prompts to the server (CHAT_TEMPLATE_BACKENDS, read from its wheel):
    `double` cannot happen there, `single` cannot happen before it, nor on a release no pin names."""
    raw = plan_with(vllm_version="0.34.0")
    assert refused(raw) == ("p.yml: field 'benchmark.chat_template': double: vLLM 0.34.0 chat-templates the prompts "
                            "of backend openai-chat once, on the server (its bench client skips the template) (read "
                            "from its wheel, docs/vllm-releases.md): write chat_template: single, or pin another release")
    raw["benchmark"]["chat_template"] = "single"
    parse_plan(raw, "p.yml")
    raw["vllm_version"] = "0.33.0"
    assert refused(raw).startswith("p.yml: field 'benchmark.chat_template': single: vLLM 0.33.0 chat-templates the "
                                   "prompts of backend openai-chat twice, on the client and again on the server")
    raw["vllm_version"] = None
    assert "templated once only where the vLLM release's bench client skips the template (0.34.0" in refused(raw)
    # unpinned and double: the worker refuses it under a 0.34 venv, before the server starts
    plan = parse_plan(plan_with(), "p.yml")
    it = item_spec(plan, "w1", "vanilla", Paths(venv="/opt/v", work_dir="/w"))
    assert set(it.release_refusals) == {"0.34.0"} and "benchmark.chat_template" in it.release_refusals["0.34.0"]


class _Owner:
    def __init__(self, version: str):
        self.spec, self.run_dir, self.state = {}, "/nonexistent", SimpleNamespace(vllm_version=version)


@pytest.mark.parametrize("version, backend, plan_says, on", [
    ("0.33.0", "openai-chat", "double", "client+server"),
    ("0.34.0", "openai-chat", "single", "server"),
    ("0.35.1", "openai-chat", "single", "server"),     # a newer release than the matrix: as 0.34
    ("0.34.0", "openai", "single", "client"),
    ("simvllm 1.0 (simulated vLLM)", "openai-chat", "double", "client+server"),   # emulates 0.32
])
def test_the_worker_derives_the_template_from_the_release_it_observed(version, backend, plan_says, on):
    """The lane's preflight: where the venv's bench templates (its release and the backend) is what the
    run record says; a plan that says otherwise fails the item before the server starts, naming the field,
    the value and the release (a release newer than the matrix included)."""
    from specfleet.worker.host import ItemFailed
    from specfleet.worker.lane import Lane
    lane = Lane(_Owner(version), None, 8000)
    assert lane.template_on(backend) == on
    item = SimpleNamespace(client=SimpleNamespace(backend=backend), fit=SimpleNamespace(chat_template=plan_says))
    lane.check_template(item)
    other = "single" if plan_says == "double" else "double"
    with pytest.raises(ItemFailed, match=rf"benchmark.chat_template: {other}: the venv's vLLM {re.escape(version)} "
                                         rf"chat-templates the prompts of backend {backend}.*nothing was started"):
        lane.check_template(SimpleNamespace(client=item.client, fit=SimpleNamespace(chat_template=other)))
