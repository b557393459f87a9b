"""The report's "Acceptance per request" section (specfleet/report/render/acceptance_report.py): each
speculative cell's per-request distribution from the worker's untimed pass, beside the runs' counters;
where there is none, why (the release lacks the flag, the plan did not ask, the pass did not finish)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from campaign_builder import write_campaign
from specfleet.report.build import report_campaign
from specfleet.report.render.acceptance_report import IMAGE
from specfleet.report.scan.acceptance_files import read
from specfleet.report.tables.acceptance_spread import spread
from specfleet.worker.layout import acceptance_file

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.26.0-cuda-h200-specfleet"


def request(i: int, accepted: int, steps: int, k: int = 4) -> dict:
    hist = [0] * (k + 1)
    if steps:  # `accepted` spread over the steps as evenly as the counts allow
        for s in range(steps):
            hist[accepted // steps + (1 if s < accepted % steps else 0)] += 1
    return {"index": i, "question_id": 81 + i, "category": "qa", "mean_acceptance_length": 1 + accepted / steps
            if steps else 1.0, "draft_acceptance_rate": accepted / (k * steps) if steps else 0.0,
            "acceptance_histogram": hist, "num_spec_steps": steps, "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": k * steps, "num_spec_tokens": k, "completion_tokens": steps + accepted}


def write_acceptance(hdir: Path, cfg: str, cell: str, requests: list, not_recorded=None) -> None:
    (hdir / acceptance_file(cfg, cell)).write_text(json.dumps({
        "specfleet_acceptance": 1, "untimed": True, "node": hdir.name, "configuration": cfg, "cell": cell,
        "level": "summary", "engine": None, "pass": {"prompts": len(requests), "concurrency": 16},
        "not_recorded": not_recorded, "requests": requests}))


def section(md: str) -> str:
    return md.split("## Acceptance per request", 1)[1].split("\n## ", 1)[0]


def test_spread_is_median_and_the_interpolated_deciles():
    assert spread([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]) == (6.0, 2.0, 10.0)
    assert spread([2.5]) == (2.5, 2.5, 2.5)
    med, p10, p90 = spread([1.0, 3.0])
    assert (med, p10, p90) == (2.0, pytest.approx(1.2), pytest.approx(2.8))


def test_the_distribution_stands_beside_the_runs_counters(tmp_path):
    camp = write_campaign(tmp_path / "c", extra={"vllm_version": "0.32.0"})
    # 10 requests of 10 steps each accepting 0..9 draft tokens, and one that never drafted
    reqs = [request(i, i * 2, 10) for i in range(10)] + [request(10, 0, 0)]
    for cell in ("conc1", "conc16"):
        write_acceptance(camp / "w1", "ngram", cell, reqs)
    out = report_campaign(camp, quiet=True)
    assert out.merged, out.error
    assert not [w for w in out.warnings if "acceptance.json" in w]  # not a result file the scan warns about
    sec = section((camp / "report.md").read_text())
    lengths = [1 + 2 * i / 10 for i in range(10)]
    med, p10, p90 = spread(lengths)
    assert (round(med, 3), round(p10, 3), round(p90, 3)) == (1.9, 1.18, 2.62)
    # runs' counters (campaign_builder: ngram conc1 2.562 / 26.0 %), then the pass: 11 of 11 with metrics, 1 without a step
    assert "| w1 | ngram | conc1 | 2.562 | 26.0 % | 11 of 11 | 1 | 1.900 [1.180, 2.620] | 22.5 % [4.5, 40.5] | 1.900 |" in sec
    assert "| w1 | ngram | conc16 | 2.661 | 27.7 % | 11 of 11 | 1 |" in sec
    # the other speculative cells: no file, and the release has the flag: not asked
    assert "| w2 | eagle3 | conc1 | 2.245 | 41.5 % | not recorded: not asked (the plan's " \
           "benchmark.spec_decode_metrics is counters) |" in sec
    assert "vanilla" not in sec   # the baseline has no acceptance
    assert f"![Acceptance per request figure 1]({IMAGE})" in sec
    svg = (camp / IMAGE).read_text()
    assert svg.startswith("<svg") and "ngram: per-request acceptance length" in svg  # matplotlib keeps the text
    assert "w1 (10 requests)" in svg  # the histogram of the requests that drafted
    html = (camp / "report.html").read_text()
    assert "Acceptance per request" in html and 'id="acceptance-' in html  # inlined, its ids namespaced
    assert "untimed pass" in sec and "linear interpolation" in sec


def test_a_release_without_the_flag_is_the_reason(tmp_path):
    camp = write_campaign(tmp_path / "c")   # the field report's vLLM 0.28.0
    report_campaign(camp, quiet=True)
    sec = section((camp / "report.md").read_text())
    assert "| w1 | ngram | conc1 | 2.562 | 26.0 % | not recorded: vLLM 0.28.0 has no " \
           "--per-request-spec-decode-metrics (from 0.29) |" in sec
    assert IMAGE not in sec and not (camp / IMAGE).exists()
    assert "No cell has per-request acceptance" in sec and "linear interpolation" not in sec  # no method without data


def test_the_real_0_26_h200_files_say_their_release_lacks_it(tmp_path):
    if not (H200 / "h200-eagle3").is_dir():
        pytest.skip("no H200 fixture")
    root = tmp_path / "r"
    shutil.copytree(H200 / "h200-eagle3" / "h200", root / "h200")
    report_campaign(root, quiet=True, force=True)
    sec = section((root / "report.md").read_text())
    assert "not recorded: vLLM 0.26.0 has no --per-request-spec-decode-metrics (from 0.29)" in sec


def test_a_hostile_or_cut_file_is_counted_never_trusted(tmp_path):
    camp = write_campaign(tmp_path / "c", extra={"vllm_version": "0.32.0"})
    bad = [request(0, 4, 4), {"index": 1, "error": "HTTP 500: EngineDeadError"},
           {**request(2, 6, 2), "num_accepted_draft_tokens": 99},         # more accepted than drafted
           {**request(3, 2, 2), "num_spec_steps": "2"}, "not an object", {"index": 5, "no_metrics": True}]
    write_acceptance(camp / "w1", "ngram", "conc1", bad, not_recorded="vllm serve exited with code 1")
    (camp / "w1" / acceptance_file("ngram", "conc16")).write_text("[" * 100000)
    got = read(camp / "w1" / acceptance_file("ngram", "conc1"))
    assert (got.sent, len(got.lengths), got.failed, got.no_metrics) == (6, 1, 4, 1)
    report_campaign(camp, quiet=True)
    sec = section((camp / "report.md").read_text())
    assert "| w1 | ngram | conc1 | 2.562 | 26.0 % | 1 of 6 (4 failed); the untimed pass did not complete: vllm " \
           "serve exited with code 1 | 0 | 2.000 [2.000, 2.000] |" in sec
    assert "| w1 | ngram | conc16 | 2.661 | 27.7 % | ngram_conc16.acceptance.json is not readable JSON (JSON nested" in sec


def test_no_response_with_metrics_says_so(tmp_path):
    camp = write_campaign(tmp_path / "c", extra={"vllm_version": "0.32.0"})
    write_acceptance(camp / "w1", "ngram", "conc1", [{"index": i, "no_metrics": True} for i in range(3)])
    report_campaign(camp, quiet=True)
    assert "| w1 | ngram | conc1 | 2.562 | 26.0 % | none of the 3 responses carried metrics.speculative_decoding" \
        in section((camp / "report.md").read_text())
