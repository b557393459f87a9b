"""Diagnosis from the files themselves (issue 23): one wave, bandwidth from the GPU name and the
launch/overhead-bound statement, loops read from generated_texts, greedy outputs that differ."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from specfleet.report import report_campaign
from specfleet.report.tables.diagnosis import bandwidth_of, loops

from campaign_builder import write_campaign

SMOLLM2 = Path(__file__).resolve().parents[1] / "fixtures/vllm-0.26.0-cuda-h200-specfleet/h200-smollm2"
LOOP = " ".join(["the line is designed to be made from recycled materials and"] * 8)
PROSE = ("Speculative decoding drafts several tokens with a cheap proposer and verifies them in one "
         "forward pass of the target model, which keeps the output distribution while it cuts the "
         "number of sequential steps when the drafts are accepted often enough to pay for themselves.")


def test_plain_files_of_one_wave_get_the_note(tmp_path):
    o = report_campaign(write_campaign(tmp_path / "c", done=False, logs=False), quiet=True)
    assert any(n.startswith("few waves: conc16 (1.0 waves)") for n in o.tables.notes), o.tables.notes
    assert not any("conc1 (" in n for n in o.tables.notes if n.startswith("few waves"))


def test_bandwidth_from_the_gpu_name_and_the_overhead_bound_statement(tmp_path):
    assert bandwidth_of("NVIDIA H200")[0] == 4800 and bandwidth_of("NVIDIA H100 80GB HBM3")[0] == 3350
    assert bandwidth_of("NVIDIA GeForce GTX 1080") is None
    shutil.copytree(SMOLLM2, tmp_path / "s")
    o = report_campaign(tmp_path / "s", quiet=True, quarantine=False)
    assert o.tables.bandwidth is not None
    assert any("4800 GB/s looked up for NVIDIA H200 (NVIDIA H200 datasheet" in n for n in o.tables.notes)
    assert any("launch/overhead-bound" in c and "no speculation can pay" in c for c in o.conclusions)
    # the flag overrides the lookup
    o2 = report_campaign(tmp_path / "s", quiet=True, quarantine=False, gpu_bandwidth_gbps=1000.0)
    assert not any("looked up" in n for n in o2.tables.notes)


def test_greedy_outputs_that_differ_from_the_baselines_are_counted(tmp_path):
    shutil.copytree(SMOLLM2, tmp_path / "s")
    o = report_campaign(tmp_path / "s", quiet=True, quarantine=False)
    r = o.tables.runs
    assert (r[r.config != "vanilla"].greedy_differs_pct > 0).all() and r[r.config == "vanilla"].greedy_differs_pct.isna().all()
    assert any("greedy decoding on both sides, yet" in c for c in o.conclusions)


def test_loops_are_read_from_the_outputs():
    assert loops(LOOP) and not loops(PROSE) and not loops("")


def _texts(root, host, cfg, conc, texts):
    f = root / host / f"{cfg}_conc{conc}.json"
    d = json.loads(f.read_text())
    d["generated_texts"] = texts
    f.write_text(json.dumps(d))


def test_half_the_requests_looping_is_degenerate_and_copy_heavy_prose_is_not(tmp_path):
    root = write_campaign(tmp_path / "c")
    _texts(root, "w1", "ngram_improved", 16, [LOOP] * 8 + [PROSE] * 8)
    o = report_campaign(root, quiet=True)
    r = o.tables.runs
    row = r[(r.config == "ngram_improved") & (r.concurrency == 16)].iloc[0]
    assert row.loop_share_pct == 50.0 and row.acceptance_flag == "DEGENERATE ACCEPTANCE"
    # legitimately copy-heavy: 99.3 % accepted, whole drafts kept, but the outputs do not loop
    root2 = write_campaign(tmp_path / "d")
    f = root2 / "w2" / "eagle3_conc16.json"
    d = json.loads(f.read_text())
    d.update(spec_decode_acceptance_rate=99.3, spec_decode_num_drafts=1000, spec_decode_draft_tokens=3000,
             spec_decode_accepted_tokens=2979, spec_decode_acceptance_length=3.979, generated_texts=[PROSE] * 16)
    f.write_text(json.dumps(d))
    o2 = report_campaign(root2, quiet=True)
    r2 = o2.tables.runs
    assert r2[(r2.config == "eagle3") & (r2.concurrency == 16)].iloc[0].acceptance_flag == ""
