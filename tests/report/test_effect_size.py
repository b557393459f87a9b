"""'Faster'/'slower' mean the same with 1 run or 10 (a minimum effect of interest with repeats too),
and a repeat far from the others gets a note (issue 23)."""
from __future__ import annotations

import json

from specfleet.report import report_campaign

from campaign_builder import REPORT, result_json, write_campaign


def _repeats(root, host, cfg, values, conc=16):
    base = REPORT[(host, cfg, conc)]
    for k, v in enumerate(values, 1):
        d = result_json((v, *base[1:]), conc=conc, extra={"node": host, "config": cfg, "vllm_version": "0.28.0",
                                                           "plan_hash": "abc123"})
        (root / host / f"{cfg}_conc{conc}_r{k}.json").write_text(json.dumps(d))
    (root / host / f"{cfg}_conc{conc}.json").unlink()


def _row(o, cfg, node, conc=16):
    r = o.tables.runs
    return r[(r.config == cfg) & (r.node == node) & (r.concurrency == conc)].iloc[0]


def test_a_tight_point_eight_percent_gain_is_not_faster(tmp_path):
    root = write_campaign(tmp_path / "c")
    _repeats(root, "w1", "vanilla", [300.0, 300.3, 299.7, 300.1, 299.9])
    _repeats(root, "w1", "ngram_improved", [302.4, 302.6, 302.3, 302.5, 302.2])   # +0.8 %, interval > 1
    o = report_campaign(root, quiet=True)
    r = _row(o, "ngram_improved", "w1")
    assert r.speedup_ci_low > 1.0 and r.speedup < 1.03
    assert r.speedup_verdict == "no measurable difference"   # as a single run of +0.8 % would be


def test_a_far_repeat_gets_an_outlier_note(tmp_path):
    root = write_campaign(tmp_path / "c")
    _repeats(root, "w2", "vanilla", [306.0, 307.0, 306.5])
    _repeats(root, "w2", "eagle3", [562.0, 563.0, 394.0])   # one run 30 % slow
    o = report_campaign(root, quiet=True)
    notes = [c for c in o.conclusions if c.startswith("Repeats: outlier: eagle3_conc16_r3.json on w2")]
    assert len(notes) == 1 and "30 % from the median" in notes[0], o.conclusions
    assert not [c for c in o.conclusions if c.startswith("Repeats: outlier:") and "vanilla" in c]
