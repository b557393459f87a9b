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
    # w2's vanilla has 12 good of 16 too: it misses the SLO, so eagle3 has no speedup at the SLO there
    assert e16.meets_slo and not e16.baseline_meets_slo and math.isnan(e16.goodput_speedup)
    e1 = runs.loc[("eagle3", "w2", 1)]
    assert e1.meets_slo and e1.baseline_meets_slo and e1.goodput_speedup == pytest.approx(
        (16 / REPORT[("w2", "eagle3", 1)][5]) / (16 / REPORT[("w2", "vanilla", 1)][5]))
    assert runs.loc[("ngram", "w1", 1)].goodput_req_s == 0 and math.isnan(runs.loc[("ngram", "w1", 1)].goodput_speedup)
    assert math.isnan(runs.loc[("vanilla", "w1", 16)].vllm_goodput_req_s)  # the files carry request_goodput: null
    text = (camp / "report.md").read_text()
    # the SLO's words; report.md now escapes '<' (main's finalize of every value): either form
    assert "Goodput under the SLO" in text and ("TPOT <= 50 ms" in text or "TPOT &lt;= 50 ms" in text)
    assert "vanilla on w1: highest concurrency meeting it: 1" in text
    assert ("eagle3 on w2: highest concurrency meeting it: 16; goodput vs the baseline where both meet the SLO: "
            f"{e1.goodput_speedup:.2f}x at conc1.") in text
    assert "ngram on w1: no concurrency measured meets it" in text
    merged = json.loads((camp / "merged.json").read_text())
    assert {"goodput_req_s", "slo_attainment_pct", "meets_slo", "goodput_speedup"} <= set(merged[0])


def test_a_speedup_at_the_slo_only_where_both_sides_meet_it_with_its_flags(tmp_path):
    """Issue 39: n-gram's goodput 'speedup at the SLO' was printed where neither side met the SLO (87.5 % vs
    62.5 % against 99 %), and its DEGENERATE flag was dropped from that line."""
    camp = tmp_path / "c"
    write(camp, {("ngram", 16): [0.04] * 14 + [0.06] * 2, ("vanilla", 16): [0.04] * 10 + [0.06] * 6,
                 ("ngram_improved", 1): [0.06] * 16, ("ngram_improved", 16): [0.06] * 16,
                 ("eagle3", 1): [0.06] * 16, ("eagle3", 16): [0.06] * 16})
    for f in camp.glob("w1/ngram_conc*.json"):   # every draft accepted at full length: a loop, not a speedup
        d = json.loads(f.read_text())
        d.update(spec_decode_acceptance_rate=100.0, spec_decode_acceptance_length=5.0,
                 spec_decode_draft_tokens=4 * d["spec_decode_num_drafts"],
                 spec_decode_accepted_tokens=4 * d["spec_decode_num_drafts"], generated_texts=None)
        f.write_text(json.dumps(d))
    for f in camp.glob("w2/vanilla_conc*.json"):  # w2's baseline misses at every load, as does eagle3
        d = json.loads(f.read_text())
        d.update(arrays([0.06] * 16))
        f.write_text(json.dumps(d))
    # (w2's baseline now differs from w1's: the node gate fails; merged anyway, this test is about goodput)
    out = report_campaign(camp, slo=Slo(tpot_ms=50, attainment_pct=99), quiet=True, force=True)
    runs = out.tables.runs.set_index(["config", "node", "concurrency"])
    n16, n1 = runs.loc[("ngram", "w1", 16)], runs.loc[("ngram", "w1", 1)]
    assert n16.slo_attainment_pct == pytest.approx(87.5) and not n16.meets_slo and not n16.baseline_meets_slo
    assert math.isnan(n16.goodput_speedup)
    assert n1.acceptance_flag == "DEGENERATE ACCEPTANCE" and n1.meets_slo and n1.goodput_speedup > 0
    text = (camp / "report.md").read_text()
    sec = text[text.index("## Goodput under the SLO"):]
    sec = sec[:sec.index("\n## ", 5)]
    cell = {(ln.split("|")[1].strip(), ln.split("|")[2].strip(), ln.split("|")[4].strip()): ln.split("|")[8].strip()
            for ln in sec.splitlines() if ln.startswith("| ") and ln.split("|")[2].strip().isdigit()}
    assert cell[("ngram", "16", "w1")] == "neither meets the SLO"
    assert cell[("ngram", "1", "w1")] == f"{n1.goodput_speedup:.2f}x (DEGENERATE ACCEPTANCE: not a speedup)"
    assert cell[("ngram_improved", "1", "w1")] == "misses the SLO"
    # the lines: a speedup only where both meet, with its flag; else the highest load each meets
    assert (f"ngram on w1: highest concurrency meeting it: 1; goodput vs the baseline where both meet the SLO: "
            f"{n1.goodput_speedup:.2f}x (DEGENERATE ACCEPTANCE: not a speedup) at conc1.") in sec
    assert ("ngram_improved on w1: no concurrency measured meets it; no cell where both meet the SLO, so no "
            "speedup at the SLO: the highest load each meets is none (ngram_improved) and 1 (vanilla)") in sec
    assert ("eagle3 on w2: no concurrency measured meets it; neither it nor the baseline meets the SLO at any "
            "load measured: no speedup at the SLO") in sec


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


def test_a_tail_dominated_speedup_at_the_slo_says_so(tmp_path):
    # every request good everywhere: eagle3 at c=16 on w2 has 1.83x the baseline's throughput at equal TPOT
    # (the arrays'): its throughput is set by a draining wave, and its goodput speedup carries the flag
    camp = tmp_path / "c"
    write(camp, {})
    out = report_campaign(camp, slo=Slo(tpot_ms=50, attainment_pct=90), quiet=True)
    e16 = out.tables.runs.set_index(["config", "node", "concurrency"]).loc[("eagle3", "w2", 16)]
    assert e16.goodput_flags == "TAIL-DOMINATED"
    sec = (camp / "report.md").read_text().split("## Goodput under the SLO")[1]
    assert f"{e16.goodput_speedup:.2f}x (TAIL-DOMINATED) at conc16" in sec
    assert f"| {e16.goodput_speedup:.2f}x (TAIL-DOMINATED) |" in sec
