"""The files this tier's device run returned (tests/fixtures/vllm-0.26.0-cuda-h200-specfleet, 2026-12-01,
three chained calls on one warm H200: h200-dummy8b + the orphan check, h200-eagle3, h200-smollm2):
provenance stamped on the device, specfleet's report of them (the handbook's example), the runner's
phases and the orphan check on the real GPU."""
import json
import shutil
from pathlib import Path

import pytest

from specfleet.report.tables.measures import DEGENERATE_RATE_PCT, NEAR_ZERO_RATE_PCT
from testbed.realgpu import orphan, report as rg, specs, watch

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "tests" / "fixtures" / "vllm-0.26.0-cuda-h200-specfleet"
EXAMPLE = REPO / "docs" / "examples" / "h200-dummy8b-report.md"
STATE = "/tmp/sfwork/h200-dummy8b/h200/state.json"   # the key watch.py used on the device
CAMPAIGNS = ("h200-dummy8b", "h200-eagle3", "h200-smollm2")


def results(campaign: str) -> dict[tuple[str, int], dict]:
    out = {}
    for f in sorted((RUN / campaign / "h200").glob("*_conc*.json")):
        cfg, _, conc = f.stem.rpartition("_conc")
        out[(cfg, int(conc))] = json.loads(f.read_text())
    return out


@pytest.fixture(scope="module")
def rep(tmp_path_factory):
    return rg.report(RUN / "h200-dummy8b" / "h200", tmp_path_factory.mktemp("r"))


def test_every_result_file_carries_the_device_provenance():
    for camp in CAMPAIGNS:
        n = 48 if camp == "h200-smollm2" else 16
        for (cfg, conc), d in results(camp).items():
            assert (d["gpu"], d["driver"], d["torch_version"], d["cuda_version"], d["engine"]) == (
                "NVIDIA H200", "580.159.04", "2.11.0+cu130", "13.0", specs.ENGINE), (camp, cfg, conc)
            assert d["completed"] == n and d["failed"] == 0


def test_report_without_env_file_shows_real_gpu_provenance(rep):
    out, camp = rep
    assert out.merged and not out.simulated and not out.quarantined and not out.warnings, out.warnings
    md = (camp / "report.md").read_text()
    assert "| h200 | vLLM 0.26.0, vllm-cuda (real GPU) | 0.26.0 | 2.11.0+cu130 | NVIDIA H200 | not recorded " \
           "| 580.159.04 | 13.0 |" in md
    plan_hash = json.loads((RUN / "h200-dummy8b" / "h200" / "state.json").read_text())["plan_hash"]
    assert f"| {plan_hash[:12]} |" in md
    assert "SIMULATED" not in md and "Weights: RANDOM" in md
    assert md.count("**ngram_improved** on h200: DEGENERATE ACCEPTANCE, not a speedup") == 2
    rows = {(r["config"], r["concurrency"]): r for r in json.loads((camp / "merged.json").read_text())}
    assert rows[("vanilla", 1)]["output_tok_s"] == pytest.approx(results("h200-dummy8b")[("vanilla", 1)][
        "output_throughput"], abs=0.005)
    assert out.tables.min_tpot_ms == pytest.approx(3.06, abs=0.005)


def test_a_degenerate_speedup_is_never_presented_as_one(rep):
    """Random weights loop under greedy decoding: n-gram accepts 100 %; the core's conclusions flag
    it at each concurrency and call nothing best (the wrapper adds no marks of its own)."""
    md = (rep[1] / "report.md").read_text()
    concl = md.split("## Conclusions", 1)[1].split("\n## ", 1)[0]
    bullets = [ln for ln in concl.splitlines() if ln.startswith("- ")]
    flagged = [ln for ln in bullets if "DEGENERATE ACCEPTANCE, not a speedup" in ln]
    assert [ln.split(":")[:2] for ln in flagged] == [["- Acceptance", " concurrency 1"], ["- Acceptance", " concurrency 16"]]
    assert not [ln for ln in bullets if "best" in ln or "faster than" in ln and "ngram_improved" in ln]
    rows = [ln for ln in md.split("## Summary", 1)[1].split("## Conclusions")[0].splitlines() if ln.startswith("| ngram")]
    assert rows and not [ln for ln in rows if "faster" in ln or "best" in ln]


def test_eagle3_plumbing_ran_and_its_near_zero_acceptance_is_flagged(tmp_path):
    """EAGLE-3 with a drafter of the target's shape, both random (--load-format dummy): the drafter
    loaded, drafted and was verified (spec-decode counters present), acceptance ~0, flagged."""
    r = results("h200-eagle3")
    for conc in (1, 16):
        e = r[("eagle3", conc)]
        assert e["spec_decode_num_drafts"] > 0 and e["spec_decode_draft_tokens"] > 0
        assert e["spec_decode_acceptance_rate"] < NEAR_ZERO_RATE_PCT
        assert "spec_decode_acceptance_rate" not in r[("vanilla", conc)]
    log = (RUN / "h200-eagle3" / "h200" / "eagle3.server.log").read_text()
    assert "eagle3" in log and "qwen3-8b-eagle3-dummy" in log
    out, camp = rg.report(RUN / "h200-eagle3" / "h200", tmp_path)
    md = (camp / "report.md").read_text()
    assert out.merged and md.count("**eagle3** on h200: NEAR-ZERO ACCEPTANCE, a LOSS, not a speedup") == 2
    assert "a drafter with random weights" in md and "Weights: RANDOM" in md
    rows = [ln for ln in md.split("## Summary", 1)[1].split("## Conclusions")[0].splitlines() if ln.startswith("| eagle3")]
    assert rows and not [ln for ln in rows if "faster" in ln or "best" in ln]


def test_real_small_model_run_by_this_tier_gives_real_acceptance_and_no_false_best(tmp_path):
    """SmolLM2-135M (real weights from the GGUF carried in two parts): n-gram acceptance is real
    (neither ~0 nor degenerate), every speculative configuration is slower, and decode is far from
    memory-bound; the report says so and calls nothing best."""
    r = results("h200-smollm2")
    for cfg in ("ngram", "ngram_improved"):
        rate = r[(cfg, 1)]["spec_decode_acceptance_rate"]
        assert NEAR_ZERO_RATE_PCT < rate < DEGENERATE_RATE_PCT
        for conc in (1, 16):
            assert r[(cfg, conc)]["output_throughput"] < r[("vanilla", conc)]["output_throughput"]
    out, camp = rg.report(RUN / "h200-smollm2" / "h200", tmp_path)
    md = (camp / "report.md").read_text()
    assert out.merged and "Weights: real" in md and "decode is far from memory-bound" in md
    assert "DEGENERATE" not in md and "NEAR-ZERO" not in md
    rows = [ln for ln in md.split("## Summary", 1)[1].split("## Conclusions")[0].splitlines() if ln.startswith("| ngram")]
    assert len(rows) == 2 and all(ln.count(" slower |") == 2 and "best" not in ln for ln in rows), rows


@pytest.mark.parametrize("campaign", ["h200-dummy8b", "h200-smollm2"])
def test_the_handbook_examples_are_the_reports_of_these_files(campaign, tmp_path):
    """docs/examples/<campaign>-report.md is regenerated (python -m testbed.realgpu.report), not edited."""
    _, camp = rg.report(RUN / campaign / "h200", tmp_path)
    assert (camp / "report.md").read_text() == (EXAMPLE.parent / f"{campaign}-report.md").read_text()


def test_stop_to_gpu_memory_free_is_under_the_target():
    phases = json.loads((RUN / "phases.json").read_text())
    assert {k.split("/")[3] for k in phases} == set(CAMPAIGNS)
    for key, events in phases.items():
        d = watch.durations(events)
        assert len(d) >= 2, key
        for item, p in d.items():
            assert p["stopping"] < watch.COST_TARGET_S, (key, item, p)
            assert p["loading"] > 40   # a real vLLM start (compile + CUDA graphs), not a stand-in


def test_runner_cost_per_item_is_under_3_s_on_the_device():
    """Every item of the three campaigns: preflight (engine version from package metadata, prompt
    fit with tokenizers + jinja2) + stopping under 3 s; the first item of each runner pays the most."""
    phases = json.loads((RUN / "phases.json").read_text())
    costs = {(k.split("/")[3], item): watch.runner_cost(p) for k, ev in phases.items()
             for item, p in watch.durations(ev).items()}
    assert len(costs) == 7 and all(c is not None and c < watch.COST_TARGET_S for c in costs.values()), costs
    first = watch.durations(phases[STATE])["vanilla"]
    assert 0 < first["preflight"] < 2.0     # was 21.3 s when the preflight ran `vllm --version`
    for camp in CAMPAIGNS:                  # the prompt fit ran without importing transformers (torch)
        st = json.loads((RUN / camp / "h200" / "state.json").read_text())
        assert st["items"][0]["prompt_fit"]["tokenizer"].startswith("tokenizers + jinja2"), camp


def test_orphan_check_on_the_real_gpu():
    rec = json.loads((RUN / "orphan.json").read_text())
    assert orphan.verdict(rec, 5000) == (True, []) and rec["ok"] is True
    assert rec["engine_core_survived_parent"] is True                  # vLLM's known failure, seen for real
    core = [p for p in rec["after_kill"] if p["argv0"].startswith("VLLM::EngineCore")]
    assert core and core[0]["ppid"] == 1 and core[0]["pgid"] == rec["killed_pid"]
    assert rec["gpu_used_before_mib"] > 100_000 and rec["gpu_used_after_mib"] < 5000
    assert rec["kill_to_gpu_free_s"] < watch.COST_TARGET_S
    assert rec["item_status"] == "failed" and "exited with code -9" in rec["item_error"]
    state = json.loads((RUN / "h200-orphan" / "h200" / "state.json").read_text())
    assert state["status"] == "failed" and state["items"][0]["status"] == "failed"


def test_a_failed_item_is_never_merged(tmp_path):
    """The orphan campaign's item failed: its folder gives no report (nothing done to merge)."""
    src = tmp_path / "run"
    shutil.copytree(RUN / "h200-orphan" / "h200", src)
    out, _ = rg.report(src, tmp_path / "out")
    assert not out.merged and "no valid, done result files" in out.error


def test_two_workers_of_one_campaign_are_merged_after_the_gate(tmp_path):
    """The two-GPU report path (issue 17), on the real files: the same run as two workers
    (h200-gpu0 with both items, h200-gpu1 with vanilla only); the gate compares the baselines."""
    runs = []
    for node, keep in (("h200-gpu0", None), ("h200-gpu1", "vanilla")):
        d = tmp_path / "in" / node
        shutil.copytree(RUN / "h200-dummy8b" / "h200", d)
        st = json.loads((d / "state.json").read_text())
        st["host"] = node
        if keep:
            st["items"] = [i for i in st["items"] if i["name"] == keep]
            for f in d.glob("ngram_improved*"):
                f.unlink()
        (d / "state.json").write_text(json.dumps(st))
        for f in d.glob("*_conc*.json"):  # each worker's runner names itself in its results
            f.write_text(json.dumps({**json.loads(f.read_text()), "node": node}))
        runs.append(d)
    out, camp = rg.report(runs, tmp_path / "out")
    assert out.merged, out.error
    assert sorted(p.name for p in camp.iterdir() if p.is_dir()) == ["h200-gpu0", "h200-gpu1"]
    md = (camp / "report.md").read_text()
    assert "h200-gpu0" in md and "h200-gpu1" in md and "Real-GPU run" in md
