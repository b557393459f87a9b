"""The real vLLM 0.28.0 files (tests/fixtures/vllm-0.28.0-cpu: the field report's release, CPU build),
unchanged, through the local pipeline: scan, gate, merge, report with an SLO. 0.28 writes no `latencies`
and no `queue_times` (they came in 0.30), so every goodput figure here is timed by TTFT + ITLs; its CPU
build logs its KV cache as "GPU KV cache size"; its server banner says 0.28.0 where the CLI (the
dist-info alias) says 0.28.0+cpu. README.md beside the files says how they were made."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specfleet.plan.slo import Slo
from specfleet.report import report_campaign
from specfleet.report.scan.folder import parse_server_log
from specfleet.resultfile.schema import SPEC_KEYS, parse_result
from specfleet.worker.crossover import good_requests, request_latencies
from specfleet.worker.telemetry import parse_metrics

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.28.0-cpu"
FLEET = FIXTURES / "real-cpu-0.28.0"        # what `fab collect` brought back from the real_vllm fleet test
BY_HAND = FIXTURES / "by-hand"              # testbed/realvllm/capture.py: vanilla and EAGLE-3, raw /metrics
CONFIGS = ("vanilla", "ngram", "eagle3")
SLO = Slo(ttft_ms=100, tpot_ms=5)           # some of the toy's requests miss it: the counts are not trivial


def _expected_goodput(d: dict, slo: Slo) -> tuple[float, float]:
    """(goodput req/s, attainment %) of one file by vLLM's rule, from TTFT + ITLs, computed here."""
    good = 0
    for ttft, itls, n, err in zip(d["ttfts"], d["itls"], d["output_lens"], d["errors"]):
        lat = ttft + sum(itls)
        tpot = (lat - ttft) / (n - 1) if n > 1 else 0.0
        good += (not err) and ttft * 1e3 <= slo.ttft_ms and tpot * 1e3 <= slo.tpot_ms
    return good / d["duration"], 100.0 * good / d["completed"]


@pytest.fixture
def fleet(tmp_path):
    root = tmp_path / "results" / FLEET.name
    shutil.copytree(FLEET, root)
    return root


def test_the_0_28_files_have_the_0_28_keys():
    for f in sorted(FLEET.glob("w1/*_conc*.json")) + sorted(BY_HAND.glob("*_conc*.json")):
        if f.name.endswith(".record.json"):
            continue
        d = json.loads(f.read_text())
        assert "latencies" not in d and "queue_times" not in d, f   # only from 0.30
        assert {"ttfts", "itls", "output_lens", "errors", "start_times"} <= set(d), f
        assert len(request_latencies(d["ttfts"], None, d["itls"])) == d["completed"] == 8, f
        parse_result(d, f)   # the project's schema reads them as they are


def test_the_real_0_28_campaign_merges_with_goodput_from_ttft_plus_itls(fleet):
    out = report_campaign(fleet, slo=SLO, quiet=True)
    assert out.merged and not out.quarantined and not out.simulated, out.error
    runs = out.tables.runs.set_index(["config", "concurrency"])
    assert sorted(runs.index) == sorted((c, n) for c in CONFIGS for n in (1, 4))
    seen_miss = False
    for (cfg, conc), row in runs.iterrows():
        d = json.loads((FLEET / "w1" / f"{cfg}_conc{conc}.json").read_text())
        assert row.output_tok_s == pytest.approx(d["output_throughput"], rel=1e-12)
        assert row.tpot_ms == pytest.approx(d["mean_tpot_ms"], rel=1e-12)
        goodput, attained = _expected_goodput(d, SLO)
        assert row.goodput_req_s == pytest.approx(goodput, rel=1e-9), (cfg, conc)
        assert row.slo_attainment_pct == pytest.approx(attained, rel=1e-9), (cfg, conc)
        seen_miss |= attained < 100.0
    assert seen_miss   # the SLO separates requests: a figure of all-good would not show the TTFT + ITLs path
    md = (fleet / "report.md").read_text()
    assert "## Goodput under the SLO" in md
    assert "Goodput not recorded" not in md and "no per-request arrays (ttfts" not in md

    # the n-gram counters the bench read from the real /metrics, one rate per draft position
    ng = json.loads((FLEET / "w1" / "ngram_conc4.json").read_text())
    assert set(SPEC_KEYS) <= set(ng) and len(ng["spec_decode_per_position_acceptance_rates"]) == 4
    assert runs.loc[("ngram", 4)].drafts == ng["spec_decode_num_drafts"] == 160
    assert runs.loc[("ngram", 4)].acceptance_length == ng["spec_decode_acceptance_length"] == 3.0
    assert not any(k.startswith("spec_decode_") for k in json.loads((FLEET / "w1" / "vanilla_conc4.json").read_text()))

    # EAGLE-3 through the product path: the worker checked the toy drafter against the model (nothing to
    # say), the random drafter proposed 3 tokens a step and the random target took none
    for conc in (1, 4):
        e = json.loads((FLEET / "w1" / f"eagle3_conc{conc}.json").read_text())
        assert json.loads(e["drafter_check"]) == {"warnings": [], "notes": []}
        assert (e["spec_decode_num_drafts"], e["spec_decode_draft_tokens"], e["spec_decode_accepted_tokens"]) == \
            (504, 1512, 0)
        assert runs.loc[("eagle3", conc)].drafts == 504 and runs.loc[("eagle3", conc)].acceptance_length == 1.0


def test_the_engine_is_0_28_0_in_every_source(fleet):
    for rec in fleet.glob("w1/*.record.json"):
        assert json.loads(rec.read_text())["engine"] == {"name": "vllm", "version": "0.28.0+cpu", "simulated": False}
    out = report_campaign(fleet, slo=SLO, quiet=True)
    prov = out.tables.provenance_results
    # the server banner (0.28.0) and the CLI's alias (0.28.0+cpu) are one release, as the gate says
    assert set(prov.vllm) == {"0.28.0+cpu"}, list(prov.vllm)
    assert out.gate.passed and out.gate.mixed_provenance == [], out.gate.mixed_provenance
    assert "0.28.0 (MIXED)" not in (fleet / "report.md").read_text()
    kv = out.tables.kv.set_index("config")
    assert set(kv.device) == {"CPU"}, kv
    # 1 GiB of KV cache (VLLM_CPU_KVCACHE_SPACE=1); EAGLE-3's draft layer takes its share of it
    assert dict(kv.kv_tokens) == {"vanilla": 2_097_152, "ngram": 2_097_152, "eagle3": 1_398_016}, kv


def test_the_0_28_cpu_log_says_gpu_kv_cache_but_the_device_is_the_cpu():
    log = FLEET / "w1" / "ngram.server.log"
    assert "GPU KV cache size: 2,097,152 tokens" in log.read_text()   # 0.28 prints GPU on every platform
    facts = parse_server_log(log, "w1", "ngram")
    assert (facts.device, facts.kv_tokens, facts.vllm_version) == ("CPU", 2_097_152, "0.28.0")
    # 0.32's CPU build names the device itself: unchanged
    f32 = parse_server_log(FIXTURES.parent / "vllm-0.32.0-cpu" / "serve_ngram.log", "w1", "ngram")
    assert f32.device == "CPU"


def test_real_0_28_eagle3_on_the_cpu_build(tmp_path):
    host = tmp_path / "results" / "by-hand" / "w1"
    host.mkdir(parents=True)
    for f in ("vanilla_conc1.json", "vanilla_conc4.json", "eagle3_conc1.json", "eagle3_conc4.json"):
        shutil.copy(BY_HAND / f, host / f)
    shutil.copy(BY_HAND / "eagle3.server.log", host / "eagle3.server.log")
    for cfg in ("vanilla", "eagle3"):
        (host / f"{cfg}.done").write_text("{}")
    out = report_campaign(host.parent, slo=SLO, quiet=True)
    assert out.merged and not out.quarantined, out.error
    runs = out.tables.runs.set_index(["config", "concurrency"])
    e4 = json.loads((BY_HAND / "eagle3_conc4.json").read_text())
    # the random drafter proposes 3 tokens a step and the random target takes none of them
    assert (e4["spec_decode_num_drafts"], e4["spec_decode_draft_tokens"], e4["spec_decode_accepted_tokens"]) == \
        (504, 1512, 0)
    assert runs.loc[("eagle3", 4)].drafts == 504 and runs.loc[("eagle3", 4)].acceptance_length == 1.0
    assert not runs.goodput_req_s.isna().any()
    kv = parse_server_log(host / "eagle3.server.log", "w1", "eagle3")
    assert kv.device == "CPU" and kv.vllm_version == "0.28.0"
    assert "Using auxiliary layers from speculative config: (0, 1)" in (host / "eagle3.server.log").read_text()


def test_the_workers_metrics_reader_on_a_real_0_28_scrape():
    before = parse_metrics((BY_HAND / "eagle3.metrics.before.txt").read_text())
    after = parse_metrics((BY_HAND / "eagle3.metrics.after.txt").read_text())
    assert {"running", "waiting", "kv_cache_usage", "preemptions", "generation_tokens",
            "requests_finished"} <= set(after), after
    # the two bench runs between the scrapes: 2 x 8 requests of 64 tokens
    assert after["requests_finished"] - before["requests_finished"] == 16
    assert after["generation_tokens"] - before["generation_tokens"] == 16 * 64


def test_good_requests_of_a_0_28_file_are_timed_by_ttft_plus_itls():
    d = json.loads((FLEET / "w1" / "ngram_conc1.json").read_text())
    got = good_requests(d["ttfts"], None, d["output_lens"], d["errors"], SLO.limits(), d["itls"])
    assert got is not None and got[1] == 8
    assert got[0] == round(_expected_goodput(d, SLO)[0] * d["duration"])


def test_the_committed_drafter_is_what_tiny_model_writes():
    from testbed.realvllm.tiny_model import eagle3_drafter_config
    assert json.loads((BY_HAND / "tiny-qwen3-eagle3.config.json").read_text()) == eagle3_drafter_config()
