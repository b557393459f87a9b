"""Goodput, SLO attainment and the goodput search on every vLLM release: 0.26-0.29 write no
`latencies` (docs/vllm-releases.md), so a request's latency is its TTFT plus its ITLs, as the
bench's streaming client times both; the report gives the true reason where a figure is absent."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from specfleet.plan import parse_plan
from specfleet.plan.slo import Slo
from specfleet.plan.releases import releases
from specfleet.report.build import report_campaign, report_plan
from specfleet.worker.crossover import _value, request_latencies, why_no_goodput
from specfleet.worker.runspec import Crossover, Slo as RunSlo

REPO = Path(__file__).resolve().parents[2]
H200_026 = REPO / "docs" / "examples" / "h200-fleet" / "h200-dummy8b"   # real vLLM 0.26.0 on the H200
CPU_032 = REPO / "tests" / "fixtures" / "vllm-0.32.0-cpu" / "ngram_conc4_greedy_detailed.json"


def test_the_releases_without_latencies_are_the_matrix_s():
    assert [v for v, r in releases().items() if "latencies" not in r.result_keys] == ["0.26.0", "0.28.0"]
    assert all("ttfts" in r.result_keys and "itls" in r.result_keys for r in releases().values())


def test_ttft_plus_itls_is_the_latency_a_real_0_32_file_records():
    d = json.loads(CPU_032.read_text())
    derived = request_latencies(d["ttfts"], None, d["itls"])
    assert derived == pytest.approx(d["latencies"], abs=1e-9)
    assert request_latencies(d["ttfts"], d["latencies"], d["itls"]) == d["latencies"]


def test_a_real_0_26_h200_file_has_goodput_for_the_worker_s_search():
    d = json.loads((H200_026 / "w1" / "vanilla_conc16_r1.json").read_text())
    assert "latencies" not in d and d["vllm_version"] == "0.26.0"
    x = Crossover(grid=[16], coarse=[16], prompts={"16": 16}, budget=1, metric="goodput", confidence=0.95,
                  tolerance_pct=3.0, baseline="vanilla", configs=["vanilla"], repeat=1, output_len=128,
                  server_per_repeat=False,
                  slo=RunSlo(limits={"ttft_ms": 60000.0, "tpot_ms": 1000.0}, attainment_pct=90.0))
    good, ok, duration = _value(x, d)
    assert good == ok == d["completed"] == 16 and duration == d["duration"]
    assert why_no_goodput(d) is None


@pytest.fixture
def campaign_026(tmp_path):
    root = tmp_path / "results"
    shutil.copytree(H200_026 / "w1", root / H200_026.name / "w1")
    raw = yaml.safe_load((REPO / "plans" / "h200-dummy8b.yml").read_text())
    raw["benchmark"]["slo"] = {"ttft_ms": 200, "tpot_ms": 10}
    return root, parse_plan(raw, REPO / "plans" / "h200-dummy8b.yml")


def test_fab_report_with_an_slo_on_the_real_0_26_h200_files_gives_goodput(campaign_026):
    root, plan = campaign_026
    out = report_plan(plan, "plans/h200-dummy8b.yml", root, quiet=True)
    runs = out.tables.runs
    assert not runs.goodput_req_s.isna().any() and not runs.slo_attainment_pct.isna().any()
    v1 = runs.set_index(["config", "concurrency"]).loc[("vanilla", 1)]
    assert v1.slo_attainment_pct == 100.0 and v1.goodput_req_s == pytest.approx(1.543, abs=0.001)
    md = (root / plan.campaign / "report.md").read_text()
    assert "## Goodput under the SLO" in md and "Goodput not recorded" not in md
    assert ("ngram_improved on w1: highest concurrency meeting it: 16; goodput vs the baseline where both meet the SLO: "
            "1.61x (DEGENERATE ACCEPTANCE: not a speedup) at conc1") in md


def test_the_true_reason_where_goodput_is_absent(campaign_026):
    root, plan = campaign_026
    camp = root / plan.campaign
    for f in (camp / "w1").glob("*_r*.json"):
        d = json.loads(f.read_text())
        del d["itls"]   # neither latencies nor ITLs: nothing to time a request by
        f.write_text(json.dumps(d))
    out = report_campaign(camp, slo=Slo(ttft_ms=200), quiet=True)
    assert out.tables.runs.goodput_req_s.isna().all()
    md = (camp / "report.md").read_text()
    assert ("Goodput not recorded: the result files have neither per-request latencies nor ITLs to add to each "
            "TTFT.") in md and "--save-detailed" not in md.split("Goodput not recorded", 1)[1].split("\n")[0]
    d = {"ttfts": [0.1], "output_lens": [3]}
    assert why_no_goodput({}) == ("the result files have no per-request arrays (ttfts, output_lens: "
                                  "vllm bench serve --save-detailed)")
    assert why_no_goodput({**d, "itls": [[0.1], [0.2]]}) == ("the result files have neither per-request latencies "
                                                             "nor ITLs to add to each TTFT")
    assert why_no_goodput({**d, "latencies": [0.3], "output_lens": [3, 4]}) == \
        "the result files' per-request arrays have different lengths"


def test_the_per_category_tpot_reads_ttft_plus_itls_on_0_26():
    from specfleet.report.scan.folder import Run
    from specfleet.report.tables.merge import _request_tpots
    from specfleet.resultfile.schema import parse_result
    path = H200_026 / "w1" / "vanilla_conc16_r1.json"
    d = json.loads(path.read_text())
    d["categories"] = ["writing"] * len(d["ttfts"])
    got = _request_tpots(Run("w1", "vanilla", 16, 1, path, parse_result(d, path)))
    want = [(t + sum(i) - t) / (n - 1) * 1000.0 for t, i, n in zip(d["ttfts"], d["itls"], d["output_lens"]) if n > 1]
    assert got is not None and [v for _, v in got] == pytest.approx(want)
