"""The real vLLM 0.32.0 files (tests/fixtures/vllm-0.32.0-cpu), unchanged, through the whole local
pipeline: scan, gate, merge, report. (test_schema.py parses each file; campaign_builder rewrites
their numbers; here nothing is rewritten.)"""
import json
import shutil

import pytest

from specfleet.report import report_campaign

from campaign_builder import FIXTURES


def test_unmodified_real_files_merge(tmp_path):
    root = tmp_path / "results" / "cpu"
    host = root / "w1"
    host.mkdir(parents=True)
    shutil.copy(FIXTURES / "vanilla_conc1.json", host / "vanilla_conc1.json")
    shutil.copy(FIXTURES / "ngram_conc4_sampled.json", host / "vanilla_conc4.json")  # no spec keys: a baseline
    shutil.copy(FIXTURES / "ngram_conc4_greedy_detailed.json", host / "ngram_conc4.json")
    shutil.copy(FIXTURES / "serve_ngram.log", host / "ngram.server.log")
    for cfg in ("vanilla", "ngram"):
        (host / f"{cfg}.done").write_text("{}")

    out = report_campaign(root, quiet=True)
    assert out.merged and not out.quarantined and not out.simulated, out.error
    rows = {(r["config"], r["concurrency"]): r for r in json.loads((root / "merged.json").read_text())}
    assert set(rows) == {("vanilla", 1), ("vanilla", 4), ("ngram", 4)}
    for (cfg, conc), name in {("vanilla", 1): "vanilla_conc1.json", ("vanilla", 4): "ngram_conc4_sampled.json",
                              ("ngram", 4): "ngram_conc4_greedy_detailed.json"}.items():
        d = json.loads((FIXTURES / name).read_text())
        assert rows[(cfg, conc)]["output_tok_s"] == pytest.approx(d["output_throughput"], rel=1e-14)
        assert rows[(cfg, conc)]["tpot_ms"] == pytest.approx(d["mean_tpot_ms"], rel=1e-14)
    greedy = json.loads((FIXTURES / "ngram_conc4_greedy_detailed.json").read_text())
    sampled = json.loads((FIXTURES / "ngram_conc4_sampled.json").read_text())
    assert rows[("ngram", 4)]["speedup"] == pytest.approx(greedy["output_throughput"] / sampled["output_throughput"], rel=1e-14)
    assert rows[("ngram", 4)]["drafts"] == 160 and rows[("ngram", 4)]["acceptance_length"] == 3.0
    assert rows[("vanilla", 1)]["stamp"] == ""
    md = (root / "report.md").read_text()
    assert "| w1 | ngram | CPU |" in md and "2,097,152" in md  # KV facts from the real server log
    assert "0.32.0" in md  # vLLM version from the log banner, in the provenance table
