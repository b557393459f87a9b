"""The files this tier's device run returned (tests/fixtures/vllm-0.26.0-cuda-h200-specfleet, 2026-12-01):
provenance stamped on the device, specfleet's report of them (the handbook's example), the runner's
phases and the orphan check on the real GPU."""
import json
import shutil
from pathlib import Path

import pytest

from testbed.realgpu import orphan, report as rg, specs, watch

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "tests" / "fixtures" / "vllm-0.26.0-cuda-h200-specfleet"
EXAMPLE = REPO / "docs" / "examples" / "h200-dummy8b-report.md"
STATE = "/tmp/sfwork/h200-dummy8b/h200/state.json"   # the key watch.py used on the device


@pytest.fixture(scope="module")
def rep(tmp_path_factory):
    return rg.report(RUN / "h200-dummy8b" / "h200", tmp_path_factory.mktemp("r"))


def test_every_result_file_carries_the_device_provenance():
    for f in sorted((RUN / "h200-dummy8b" / "h200").glob("*_conc*.json")):
        d = json.loads(f.read_text())
        assert (d["gpu"], d["driver"], d["torch_version"], d["cuda_version"], d["engine"]) == (
            "NVIDIA H200", "580.159.04", "2.11.0+cu130", "13.0", specs.ENGINE), f.name
        assert d["completed"] == 16 and d["failed"] == 0


def test_report_without_env_file_shows_real_gpu_provenance(rep):
    out, camp = rep
    assert out.merged and not out.simulated and not out.quarantined and not out.warnings, out.warnings
    md = (camp / "report.md").read_text()
    assert "| h200 | vLLM 0.26.0, vllm-cuda (real GPU) | 0.26.0 | 2.11.0+cu130 | NVIDIA H200 | not recorded " \
           "| 580.159.04 | 13.0 |" in md and "| 8693b7beb8f4 |" in md
    assert "SIMULATED" not in md and "Weights: RANDOM" in md
    assert md.count("DEGENERATE ACCEPTANCE: ngram_improved") == 2
    rows = {(r["config"], r["concurrency"]): r for r in json.loads((camp / "merged.json").read_text())}
    assert rows[("vanilla", 1)]["output_tok_s"] == pytest.approx(195.40, abs=0.005)
    assert out.tables.min_tpot_ms == pytest.approx(3.06, abs=0.005)


def test_the_handbook_example_is_the_report_of_these_files(rep):
    """docs/examples/h200-dummy8b-report.md is regenerated, not edited: it must match."""
    assert (rep[1] / "report.md").read_text() == EXAMPLE.read_text()


def test_stop_to_gpu_memory_free_is_under_the_target():
    d = watch.durations(json.loads((RUN / "phases.json").read_text())[STATE])
    assert set(d) == {"vanilla", "ngram_improved"}
    for item, phases in d.items():
        assert phases["stopping"] < watch.COST_TARGET_S, (item, phases)
        assert phases["loading"] > 60   # a real vLLM start (compile + CUDA graphs), not a stand-in


@pytest.mark.xfail(strict=True, reason="measured before the runner read the engine version from package "
                   "metadata: its preflight ran `vllm --version` (imports vLLM: 21.3 s on the H200) for the first "
                   "item; the target is under 3 s per item; needs a new device run (tests/bench/test_engine_version.py "
                   "proves the preflight no longer imports vLLM)")
def test_runner_cost_per_item_is_under_3_s_on_the_device():
    d = watch.durations(json.loads((RUN / "phases.json").read_text())[STATE])
    assert all(watch.runner_cost(p) < watch.COST_TARGET_S for p in d.values()), d


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
        runs.append(d)
    out, camp = rg.report(runs, tmp_path / "out")
    assert out.merged, out.error
    assert sorted(p.name for p in camp.iterdir() if p.is_dir()) == ["h200-gpu0", "h200-gpu1"]
    md = (camp / "report.md").read_text()
    assert "h200-gpu0" in md and "h200-gpu1" in md and "Real-GPU run" in md
