"""Provenance that acts (issue 23): GPU, driver, CUDA, torch, vLLM and decoding compared across nodes
and within a node; a mismatch refuses the merge (exit 8, as for mixed plans) unless --force."""
from __future__ import annotations

import json

from specfleet.report import report_campaign
from specfleet.report.render.document import MIXED_PROVENANCE_STAMP

from campaign_builder import REPORT, write_campaign

GREEDY = {"sampling_params": '{"temperature":0.0}', "decoding": "greedy"}


def _camp(tmp_path, per_host: dict[str, dict]):
    root = tmp_path / "c"
    for host, extra in per_host.items():
        write_campaign(root, {k: v for k, v in REPORT.items() if k[0] == host}, extra={**GREEDY, **extra})
    return root


def test_other_gpu_and_vllm_on_the_other_node_refuse_the_merge_and_force_stamps(tmp_path):
    root = _camp(tmp_path, {"w1": {"gpu": "NVIDIA RTX PRO 6000 Blackwell", "vllm_version": "0.28.0"},
                            "w2": {"gpu": "NVIDIA H100 80GB HBM3", "vllm_version": "0.27.1"}})
    o = report_campaign(root, quiet=True)
    assert not o.merged and o.exit_code == 8
    probs = " ".join(o.gate.problems)
    assert "GPU model differs across nodes" in probs and "NVIDIA H100 80GB HBM3 on w2" in probs
    assert "vLLM version differs across nodes" in probs and "0.27.1 on w2" in probs
    forced = report_campaign(root, quiet=True, force=True)
    assert forced.merged and forced.exit_code == 0
    assert (root / "report.md").read_text().startswith(f"> **⚠ {MIXED_PROVENANCE_STAMP}")


def test_a_version_mismatch_within_one_node_is_seen(tmp_path):
    root = _camp(tmp_path, {"w1": {}, "w2": {}})
    f = root / "w1" / "ngram_conc16.json"
    d = json.loads(f.read_text())
    d["vllm_version"] = "0.27.1"
    f.write_text(json.dumps(d))
    o = report_campaign(root, quiet=True)
    assert not o.merged and any("vLLM version differs within w1" in p for p in o.gate.problems), o.gate.problems
    row = o.tables.provenance_results
    assert row[(row.node == "w1") & (row.config == "ngram")].vllm.iloc[0] == "0.28.0 | 0.27.1 (MIXED)"


def test_greedy_on_one_node_sampled_on_the_other_is_refused(tmp_path):
    root = _camp(tmp_path, {"w1": {}, "w2": {"sampling_params": "{}", "decoding": "sampled (temperature 0.6)"}})
    o = report_campaign(root, quiet=True)
    assert not o.merged and any(p.startswith("decoding differs across nodes") for p in o.gate.problems)


def test_the_plans_vllm_pin_is_checked(tmp_path):
    root = _camp(tmp_path, {"w1": {"vllm_version": "0.27.1"}, "w2": {"vllm_version": "0.27.1"}})
    assert report_campaign(root, quiet=True, vllm_pin="0.27.1").merged
    o = report_campaign(root, quiet=True, vllm_pin="0.28.0")
    assert not o.merged and any("the plan pins vllm_version 0.28.0, but w1 ran 0.27.1" in p for p in o.gate.problems)


def test_sampling_is_read_from_what_the_runner_writes_and_the_table_has_version_columns(tmp_path):
    root = _camp(tmp_path, {"w1": {"gpu": "NVIDIA H200", "torch_version": "2.9.0", "driver": "580.1",
                                   "cuda_version": "13.0"},
                            "w2": {"gpu": "NVIDIA H200", "torch_version": "2.9.0", "driver": "580.1",
                                   "cuda_version": "13.0"}})
    o = report_campaign(root, quiet=True)
    assert o.merged
    t = o.tables.provenance_results
    assert set(t.sampling) == {'sent {"temperature":0.0}'} and set(t.decoding) == {"greedy"}
    assert set(t.gpu_model) == {"NVIDIA H200"} and set(t.vllm) == {"0.28.0"} and set(t.torch) == {"2.9.0"}
    md = (root / "report.md").read_text()
    assert "sampling: not recorded" not in md and "| gpu model | driver | cuda | torch | vllm | decoding |" in md


def test_torchs_cuda_build_is_not_compared_with_the_drivers_cuda(tmp_path):
    root = _camp(tmp_path, {"w1": {"cuda_version": "12.8"}, "w2": {"cuda_version": "12.8"}})
    for h in ("w1", "w2"):
        (root / h / "provenance.json").write_text(json.dumps({"cuda": "13.0", "gpu_name": "", "dists": {}}))
    o = report_campaign(root, quiet=True)
    assert o.merged, o.gate.problems
    assert set(o.tables.provenance_results.cuda) == {"12.8 (driver 13.0)"}


def test_a_build_label_the_server_log_leaves_out_is_the_same_release(tmp_path):
    """vLLM's server log prints its release (0.32.0) while the dist and the result say the build
    (0.32.0+cpu): one release, no mismatch and the pin holds; another release still refuses."""
    from specfleet.report.gates.consistency import _with_local_label
    assert _with_local_label({"0.32.0", "0.32.0+cpu"}) == {"0.32.0": "0.32.0+cpu", "0.32.0+cpu": "0.32.0+cpu"}
    assert _with_local_label({"0.32.0", "0.32.0+cpu", "0.32.0+cu128"})["0.32.0"] == "0.32.0"  # which one? not guessed
    root = _camp(tmp_path, {"w1": {"vllm_version": "0.32.0+cpu"}, "w2": {"vllm_version": "0.32.0"}})
    assert report_campaign(root, quiet=True, vllm_pin="0.32.0+cpu").merged
    o = report_campaign(root, quiet=True, vllm_pin="0.33.0")
    assert not o.merged and any("the plan pins vllm_version 0.33.0" in p for p in o.gate.problems)
    root2 = _camp(tmp_path / "x", {"w1": {"vllm_version": "0.32.0+cpu"}, "w2": {"vllm_version": "0.31.0"}})
    assert not report_campaign(root2, quiet=True).merged
