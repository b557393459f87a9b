"""Equivalence across the GPUs of one node, and the packing/GPU provenance the report states."""
import json

from specfleet.report.scan.folder import scan_folder
from specfleet.report.gates.gate import EquivalenceRule, check_equivalence
from specfleet.report.gates.consistency import result_table

from campaign_builder import REPORT, result_json, write_campaign

RULE = EquivalenceRule(metric="output_throughput", tolerance_pct=3.0, concurrency=16)


def stamp(path, **meta):
    d = json.loads(path.read_text())
    d.update(meta)
    path.write_text(json.dumps(d))


def test_configurations_on_several_gpus_with_the_baseline_on_one_say_not_checked(tmp_path):
    root = write_campaign(tmp_path / "c")
    for f in (root / "w1").glob("*.json"):
        if "_conc" in f.name:
            stamp(f, gpu_uuids="GPU-a" if f.name.startswith("vanilla") else "GPU-b", gpu_names="NVIDIA H200",
                  packing="shared")
    g = check_equivalence(scan_folder(root), RULE)
    assert any("across the GPUs of w1: not checked" in n and "baseline 'vanilla' on GPU-a only" in n for n in g.notes)
    assert g.packing.startswith("shared") and "skew" in g.packing
    rows = result_table(scan_folder(root))
    assert rows[(rows.node == "w1") & (rows.config == "vanilla")].gpus.iloc[0] == "GPU-a (NVIDIA H200)"
    assert rows[rows.node == "w2"].gpus.iloc[0].startswith("not recorded")


def test_a_slower_gpu_of_one_node_fails_the_gate(tmp_path):
    root = write_campaign(tmp_path / "c")
    base = REPORT[("w1", "vanilla", 16)]
    (root / "w1" / "vanilla_conc16.json").unlink()
    for k, (v, gpu) in enumerate([(301.0, "GPU-a"), (301.5, "GPU-a"), (283.0, "GPU-b"), (283.4, "GPU-b")], 1):
        d = result_json((v, *base[1:]), conc=16, extra={"node": "w1", "config": "vanilla", "plan_hash": "abc123",
                                                        "vllm_version": "0.28.0", "gpu_uuids": gpu})
        (root / "w1" / f"vanilla_conc16_r{k}.json").write_text(json.dumps(d))
    g = check_equivalence(scan_folder(root), RULE)
    gpu = [c for c in g.checks if c.node_a.startswith("w1 [")]
    assert [(c.node_a, c.node_b) for c in gpu] == [("w1 [GPU-a]", "w1 [GPU-b]")]
    assert not gpu[0].passed and gpu[0].diff_pct < -5 and not g.passed


def test_one_gpu_results_state_exclusive_packing(tmp_path):
    g = check_equivalence(scan_folder(write_campaign(tmp_path / "c")), RULE)
    assert g.packing.startswith("exclusive") and not any("GPUs of" in n for n in g.notes)


def every_gpu_campaign(tmp_path, gpu_b_factor):
    """w1's baseline on GPU-a and, as equivalence.every_gpu writes it, again on GPU-b (vanilla.gpu1)."""
    data = dict(REPORT)
    for (host, cfg, conc), vals in REPORT.items():
        if host == "w1" and cfg == "vanilla":
            data[("w1", "vanilla.gpu1", conc)] = (vals[0] * gpu_b_factor, vals[1] * gpu_b_factor, *vals[2:])
    root = write_campaign(tmp_path / "c", data)
    for f in (root / "w1").glob("*_conc*.json"):
        stamp(f, gpu_uuids="GPU-a" if f.name.startswith("vanilla_") else "GPU-b", gpu_names="NVIDIA H200",
              packing="shared")
    return root


def test_every_gpu_copies_feed_the_gpu_check_and_stay_out_of_the_tables(tmp_path):
    from specfleet.report.build import report_campaign
    same = every_gpu_campaign(tmp_path / "same", 1.004)
    g = check_equivalence(scan_folder(same), RULE)
    gpu = [c for c in g.checks if c.node_a.startswith("w1 [")]
    assert [(c.node_a, c.node_b, c.conc) for c in gpu] == [("w1 [GPU-a]", "w1 [GPU-b]", 16)] and gpu[0].passed
    assert not any("not checked" in n for n in g.notes)
    out = report_campaign(same, rule=RULE, quiet=True)
    assert out.merged
    assert "vanilla.gpu1" not in set(out.tables.runs.config) and "vanilla" in set(out.tables.runs.config)
    assert "vanilla.gpu1" not in (same / "merged.csv").read_text()
    slow = every_gpu_campaign(tmp_path / "slow", 0.90)
    g = check_equivalence(scan_folder(slow), RULE)
    assert not g.passed and any(c.node_a == "w1 [GPU-a]" and not c.passed for c in g.checks)
