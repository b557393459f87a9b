"""benchmark.slo: goodput from the per-request arrays, per cell, speedup at the SLO, the highest
concurrency that meets it, and --goodput passed to vllm bench serve."""
from __future__ import annotations

import json
import math

import pytest

from campaign_builder import REPORT, SPEC, result_json
from compare_builder import plan_raw
from specfleet.campaign.commands import Paths, bench_argv
from specfleet.plan import PlanError, parse_plan
from specfleet.plan.slo import Slo
from specfleet.report.build import report_campaign


def arrays(tpot_s: list[float], ttft_s: float = 0.1, out: int = 101) -> dict:
    return {"ttfts": [ttft_s] * len(tpot_s), "output_lens": [out] * len(tpot_s),
            "latencies": [ttft_s + (out - 1) * t for t in tpot_s], "errors": [""] * len(tpot_s)}


def write(root, tpots: dict) -> None:
    """REPORT's campaign, each file with 16 requests whose TPOTs are tpots[(config, conc)]."""
    for (host, cfg, conc), vals in REPORT.items():
        h = root / host
        h.mkdir(parents=True, exist_ok=True)
        d = result_json(vals, SPEC.get((cfg, conc)), conc, {"node": host, "config": cfg, "plan_hash": "p"})
        d.update(arrays(tpots.get((cfg, conc), [0.04] * 16)))
        (h / f"{cfg}_conc{conc}.json").write_text(json.dumps(d))
        (h / f"{cfg}.done").write_text("")


def test_goodput_per_cell_and_the_highest_load_meeting_the_slo(tmp_path):
    camp = tmp_path / "c"
    slow = [0.04] * 12 + [0.06] * 4            # 12 of 16 within TPOT 50 ms
    write(camp, {("vanilla", 16): slow, ("eagle3", 16): [0.02] * 16, ("ngram", 1): [0.06] * 16, ("ngram", 16): [0.06] * 16})
    out = report_campaign(camp, slo=Slo(tpot_ms=50, attainment_pct=90), quiet=True)
    runs = out.tables.runs.set_index(["config", "node", "concurrency"])
    v16 = runs.loc[("vanilla", "w1", 16)]
    assert v16.slo_attainment_pct == pytest.approx(75.0) and not v16.meets_slo
    assert v16.goodput_req_s == pytest.approx(12 / REPORT[("w1", "vanilla", 16)][5])
    e16 = runs.loc[("eagle3", "w2", 16)]
    assert e16.meets_slo and e16.goodput_speedup == pytest.approx(
        (16 / REPORT[("w2", "eagle3", 16)][5]) / (12 / REPORT[("w2", "vanilla", 16)][5]))  # w2 vanilla: 12 good too
    assert runs.loc[("ngram", "w1", 1)].goodput_req_s == 0 and runs.loc[("ngram", "w1", 1)].goodput_speedup == 0
    assert math.isnan(runs.loc[("vanilla", "w1", 16)].vllm_goodput_req_s)  # the files carry request_goodput: null
    text = (camp / "report.md").read_text()
    assert "Goodput under the SLO" in text and "TPOT <= 50 ms" in text
    assert "vanilla on w1: highest concurrency meeting it: 1" in text
    assert "eagle3 on w2: highest concurrency meeting it: 16; goodput vs the baseline" in text
    assert "ngram on w1: no concurrency measured meets it" in text
    merged = json.loads((camp / "merged.json").read_text())
    assert {"goodput_req_s", "slo_attainment_pct", "meets_slo", "goodput_speedup"} <= set(merged[0])


def test_without_arrays_goodput_is_not_recorded(tmp_path):
    camp = tmp_path / "c"
    write(camp, {})
    for f in camp.glob("*/*.json"):
        d = json.loads(f.read_text())
        del d["ttfts"]
        f.write_text(json.dumps(d))
    out = report_campaign(camp, slo=Slo(ttft_ms=500), quiet=True)
    assert out.tables.runs.goodput_req_s.isna().all()
    assert "Goodput not recorded" in (camp / "report.md").read_text()


def test_no_slo_no_columns(tmp_path):
    camp = tmp_path / "c"
    write(camp, {})
    out = report_campaign(camp, quiet=True)
    assert "goodput_req_s" not in out.tables.runs and "Goodput" not in (camp / "report.md").read_text()


def test_plan_slo_goes_to_vllm_and_the_hash():
    plain = parse_plan(plan_raw(), "plans/demo.yml")
    raw = plan_raw(**{"benchmark.slo": {"ttft_ms": 2000, "tpot_ms": 50.5}})
    p = parse_plan(raw, "plans/demo.yml")
    argv = bench_argv(p, "w1", "eagle3", 16, Paths(venv="/v", work_dir="/w", dataset="/d"))
    i = argv.index("--goodput")
    assert argv[i + 1:i + 3] == ["ttft:2000", "tpot:50.5"] and argv[i + 3].startswith("--")
    assert "--goodput" not in bench_argv(plain, "w1", "eagle3", 16, Paths(venv="/v", work_dir="/w", dataset="/d"))
    assert p.plan_hash() != plain.plan_hash()
    assert '"slo"' not in plain.canonical_json()  # a plan without an SLO keeps its hash
    with pytest.raises(PlanError, match="field 'benchmark.slo': .*needs at least one of ttft_ms"):
        parse_plan(plan_raw(**{"benchmark.slo": {"attainment_pct": 90}}), "plans/demo.yml")
