import json
import shutil
from pathlib import Path

import pytest

from specfleet.plan import load_plan
from specfleet.report.scan.folder import parse_server_log, scan_folder
from specfleet.report.scan.cells import MISSING, cell_states, planned_from

from campaign_builder import FIXTURES, REPORT, write_campaign


def _all_files(root):
    return sorted(p.name for p in root.rglob("*") if p.is_file())


def test_scan_reads_every_done_run(campaign):
    camp = scan_folder(campaign)
    assert len(camp.runs) == len(REPORT)
    assert camp.hosts == ["w1", "w2"] and sorted({r.conc for r in camp.runs}) == [1, 16]
    assert not camp.quarantined and not camp.pending
    assert camp.nodes["w1"].provenance["vllm_version"] == "0.28.0"
    assert camp.nodes["w2"].provenance["plan_hash"] == "abc123"


def test_item_without_done_marker_is_not_merged(campaign):
    (campaign / "w2" / "eagle3.done").unlink()
    camp = scan_folder(campaign)
    assert "eagle3" not in camp.configs
    assert {p.name for p in camp.pending} == {"eagle3_conc1.json", "eagle3_conc16.json"}
    assert (campaign / "w2" / "eagle3_conc1.json").exists()  # left in place
    assert any("no done marker" in w for w in camp.warnings)


def test_state_json_can_mark_done(campaign):
    (campaign / "w2" / "eagle3.done").unlink()
    (campaign / "w2" / "state.json").write_text(json.dumps(
        {"items": [{"name": "eagle3", "status": "done"}, {"name": "vanilla", "status": "running"}],
         "vllm_version": "0.32.0+cu130", "model_path": "/mnt/models/Qwen3-32B"}))
    camp = scan_folder(campaign)
    assert "eagle3" in camp.configs
    assert camp.nodes["w2"].done == {"eagle3", "vanilla"}  # vanilla by its marker, eagle3 by the state
    assert camp.nodes["w2"].provenance["vllm_version"] == "0.32.0+cu130"
    assert camp.nodes["w2"].provenance["model_path"] == "/mnt/models/Qwen3-32B"


def test_truncated_file_is_quarantined_and_nothing_else_lost(campaign):
    bad = campaign / "w1" / "ngram_conc16.json"
    text = bad.read_text()
    bad.write_text(text[: len(text) // 2])
    before = _all_files(campaign)
    camp = scan_folder(campaign)
    assert len(camp.runs) == len(REPORT) - 1
    [q] = camp.quarantined
    assert q.dest == campaign / "quarantine" / "w1" / "ngram_conc16.json"
    assert q.dest.read_text() == text[: len(text) // 2]  # moved, not rewritten
    assert not bad.exists()
    assert "ngram_conc16.json" in q.message() and "invalid JSON" in q.message()
    assert (campaign / "quarantine" / "w1" / "ngram_conc16.json.reason.txt").exists()
    after = _all_files(campaign)
    assert sorted(set(before)) == sorted(set(after) - {"ngram_conc16.json.reason.txt"})


def test_mislabelled_concurrency_is_quarantined(campaign):
    p = campaign / "w2" / "eagle3_conc16.json"
    d = json.loads(p.read_text())
    d["max_concurrency"] = 4
    p.write_text(json.dumps(d))
    camp = scan_folder(campaign)
    assert [q.reason for q in camp.quarantined] == [
        "max_concurrency is 4 but the file name says conc16"]



def test_a_result_whose_metadata_names_another_node_or_configuration_is_a_copy_not_merged(campaign):
    """The runner writes node and config into every result it names: w1's file copied into w2's folder
    would otherwise pass the equivalence gate against itself, and eagle3's run copied as ngram_improved
    would be reported as ngram_improved (they were warnings, and merged)."""
    shutil.copy(campaign / "w1" / "vanilla_conc16.json", campaign / "w2" / "vanilla_conc16.json")
    d = json.loads((campaign / "w2" / "eagle3_conc1.json").read_text())
    (campaign / "w1" / "ngram_improved_conc1.json").write_text(json.dumps({**d, "node": "w1"}))
    camp = scan_folder(campaign, quarantine=False)
    assert sorted((q.host, q.source.name, q.reason) for q in camp.quarantined) == [
        ("w1", "ngram_improved_conc1.json", "its metadata says configuration 'eagle3', its name 'ngram_improved': "
                                            "a copy of another configuration's result"),
        ("w2", "vanilla_conc16.json", "its metadata says node 'w1', its folder 'w2': a copy of another node's result")]
    assert ("w2", "vanilla", 16) not in {(r.host, r.config, r.conc) for r in camp.runs}
    assert len(camp.runs) == len(REPORT) - 2


def test_repeats_are_separate_runs(tmp_path):
    root = tmp_path / "c"
    write_campaign(root)
    shutil.copy(root / "w1" / "vanilla_conc16.json", root / "w1" / "vanilla_conc16_r2.json")
    camp = scan_folder(root)
    reps = [r.repeat for r in camp.runs if (r.host, r.config, r.conc) == ("w1", "vanilla", 16)]
    assert sorted(reps, key=str) == sorted([None, 2], key=str)


def test_real_cpu_server_log_kv_facts(tmp_path):
    f = parse_server_log(FIXTURES / "serve_ngram.log", "w1", "ngram")
    assert f.device == "CPU" and f.kv_tokens == 2_097_152
    assert f.tokens_per_request == 2048 and f.max_concurrency == 1024.0
    assert f.vllm_version == "0.32.0"


def test_gpu_server_log_kv_facts(campaign):
    camp = scan_folder(campaign)
    f = next(k for k in camp.kv if (k.host, k.config) == ("w2", "vanilla"))
    assert (f.device, f.kv_tokens, f.tokens_per_request, f.max_concurrency) == ("GPU", 103840, 2048, 50.70)
    assert f.weights_gib == 61.0348 and f.kv_budget_gib == 25.35


def test_bench_runner_state_items_mark_done(campaign):
    (campaign / "w1" / "ngram.done").unlink()
    (campaign / "w1" / "state.json").write_text(json.dumps(
        {"schema": 1, "host": "w1", "plan_hash": "abc123", "vllm_version": "0.28.0",
         "started_at": "2026-08-28T01:00:00Z",
         "items": [{"name": "ngram", "status": "done"}, {"name": "vanilla", "status": "failed"}]}))
    camp = scan_folder(campaign)
    assert "ngram" in {r.config for r in camp.runs if r.host == "w1"}
    assert camp.nodes["w1"].provenance["started_at"] == "2026-08-28T01:00:00Z"


def test_appended_server_log_uses_last_start(tmp_path):
    log = tmp_path / "x.server.log"
    log.write_text("==== specfleet t1 run r1: vllm serve\nGPU KV cache size: 1,000 tokens\n"
                   "==== specfleet t2 run r2: vllm serve\nGPU KV cache size: 2,000 tokens\n")
    assert parse_server_log(log, "w1", "x").kv_tokens == 2000


@pytest.mark.parametrize("items", ["5", '["x"]', '[{"name": "eagle3"}]', '[{"name": ["a"], "status": "done"}]'])
def test_a_state_json_of_another_shape_is_one_warning_and_the_markers_decide(campaign, items):
    """A host's state.json (fetched from the worker as it is) whose items are not the runner's shape:
    one warning naming the file and the field, the done markers decide, and the planned cells are still
    listed (a TypeError in the missing cell's reason stopped fab collect and fab report for every host)."""
    (campaign / "w2" / "eagle3.done").unlink()
    (campaign / "w2" / "state.json").write_text('{"status": "running", "items": %s}' % items)
    camp = scan_folder(campaign, quarantine=False)
    plan = load_plan(Path(__file__).resolve().parents[2] / "plans" / "qwen3-32b.yml")  # the report's four configurations
    states = {(c.config, c.node, c.cell): c for c in cell_states(camp, planned_from(plan, "p.yml", campaign))}
    [warning] = [w for w in camp.warnings if "state.json" in w]
    assert str(campaign / "w2" / "state.json") in warning and "items" in warning and "not read" in warning
    assert camp.nodes["w2"].state is None and camp.nodes["w2"].done == {"vanilla"}
    assert states[("eagle3", "w2", "conc16")].state == MISSING
    assert "'eagle3' has no done marker on w2" in states[("eagle3", "w2", "conc16")].why
