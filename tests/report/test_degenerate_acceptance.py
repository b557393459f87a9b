"""Degenerate and near-zero acceptance (measures.acceptance_flag, docs/report.md "Degenerate
acceptance"): the core's conclusions flag them per configuration and concurrency, never call them
faster or best, and the flag is in report.md, report.html and merged.json."""
import json
import shutil
from pathlib import Path

import pytest

from specfleet.report import report_campaign
from specfleet.report.tables.measures import (DEGENERATE, DEGENERATE_RATE_PCT, NEAR_ZERO, NEAR_ZERO_RATE_PCT,
                                        acceptance_flag)

import campaign_builder
from campaign_builder import write_campaign

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.26.0-cuda-h200-specfleet"


def row(rate, alen, drafts, dtok):
    return {"acceptance_rate_pct": rate, "acceptance_length": alen, "drafts": drafts, "draft_tokens": dtok}


def test_the_rule_at_its_edges():
    assert acceptance_flag(row(100.0, 4.0, 1000, 3000)) == DEGENERATE          # k = 3, length k + 1
    assert acceptance_flag(row(DEGENERATE_RATE_PCT, 3.97, 1000, 3000)) == DEGENERATE
    assert acceptance_flag(row(98.9, 3.97, 1000, 3000)) == ""                  # a very good drafter
    assert acceptance_flag(row(100.0, 2.5, 1000, 3000)) == ""                  # counters disagree: not the loop
    assert acceptance_flag(row(0.0, 1.0, 4080, 12240)) == NEAR_ZERO
    assert acceptance_flag(row(NEAR_ZERO_RATE_PCT, 1.15, 1000, 3000)) == ""    # "below" the value
    assert acceptance_flag(row(float("nan"), float("nan"), 0, 0)) == ""        # no draft: no flag
    assert acceptance_flag({"drafts": float("nan")}) == ""                     # the baseline


@pytest.fixture
def flagged(tmp_path, monkeypatch):
    """The §4.1 campaign with ngram_improved accepting every draft whole (k = 3, length 4) and
    eagle3 accepting 0.5 %: by speed alone both are faster than vanilla (1.18x, 2.1x)."""
    for conc in (1, 16):
        monkeypatch.setitem(campaign_builder.SPEC, ("ngram_improved", conc), (100.0, 4.0, 1000, 3000))
        monkeypatch.setitem(campaign_builder.SPEC, ("eagle3", conc), (0.5, 1.015, 2000, 30))
    root = write_campaign(tmp_path / "c")
    out = report_campaign(root, quiet=True)
    assert out.merged, out.error
    return out, root


def test_the_counters_alone_count_when_the_texts_do_not_loop():
    """Issue 39: not one of 3,300 drafted tokens rejected at length k + 1 over 1,100 drafts is no trained
    drafter, whether or not the saved texts happen to loop; a legitimately copy-heavy 99.3 % is not."""
    never = dict(row(100.0, 4.0, 1100, 3300), loop_share_pct=0.0)
    assert acceptance_flag(never) == DEGENERATE
    assert acceptance_flag(dict(row(99.3, 3.979, 1000, 3000), loop_share_pct=0.0)) == ""
    assert acceptance_flag(dict(row(100.0, 4.0, 50, 150), loop_share_pct=0.0)) == ""   # 150 tokens: chance
    assert acceptance_flag(dict(row(60.0, 2.0, 1000, 3000), loop_share_pct=50.0)) == DEGENERATE
    from specfleet.report.tables.conclusions import flagged_line
    import pandas as pd
    line = flagged_line(pd.Series(dict(never, config="ngram", node="w1", acceptance_flag=DEGENERATE,
                                       speedup=2.6)))
    assert "not one of its 3,300 drafted tokens rejected" in line and "0 % of the saved outputs" in line


def test_near_zero_acceptance_that_slows_is_called_a_loss_with_its_cost():
    from specfleet.report.tables.conclusions import flagged_line
    import pandas as pd
    line = flagged_line(pd.Series(dict(row(0.5, 1.015, 2000, 6000), config="eagle3", node="w2",
                                       acceptance_flag=NEAR_ZERO, speedup=0.82)))
    assert f"{NEAR_ZERO}, a LOSS, not a speedup" in line and "it costs 18 % (0.82x the baseline)" in line


def test_flagged_configurations_are_never_best_or_faster(flagged):
    out, root = flagged
    for conc in (1, 16):
        lines = [c for c in out.conclusions if c.startswith(f"Acceptance: concurrency {conc}:")]
        deg = [c for c in lines if "**ngram_improved**" in c]
        near = [c for c in lines if "**eagle3**" in c]
        assert len(deg) == 1 and f"{DEGENERATE}, not a speedup" in deg[0] and "length 4.00 = 1 + the 3.00" in deg[0]
        # near-zero acceptance only costs (drafting and verifying for ~1 token a step): called a loss
        assert len(near) == 1 and f"{NEAR_ZERO}, a LOSS, not a speedup" in near[0] and "it costs" not in near[0]
    m = {row[0]: row[1:] for row in out.model.summary.rows}    # the verdicts
    assert all(f"{DEGENERATE}: not a speedup" in c and "faster" not in c for c in m["ngram_improved"])
    assert all(f"{NEAR_ZERO}: a loss, not a speedup" in c and "faster" not in c for c in m["eagle3"])
    assert m["ngram"][0].endswith("faster, best"), m
    assert not any("best" in c for c in out.conclusions if "ngram_improved" in c or "eagle3" in c)


def test_the_flag_is_in_every_output(flagged):
    _, root = flagged
    rows = {(r["config"], r["concurrency"]): r for r in json.loads((root / "merged.json").read_text())}
    assert {k: r["acceptance_flag"] for k, r in rows.items() if r["acceptance_flag"]} == {
        ("ngram_improved", 1): DEGENERATE, ("ngram_improved", 16): DEGENERATE,
        ("eagle3", 1): NEAR_ZERO, ("eagle3", 16): NEAR_ZERO}
    md, html = (root / "report.md").read_text(), (root / "report.html").read_text()
    for text in (md, html):
        assert text.count(f"{DEGENERATE}, not a speedup") == 2 and text.count(f"{NEAR_ZERO}, a LOSS, not a speedup") == 2
    res = [ln for ln in md.splitlines() if ln.startswith("| ngram_improved |") and "x |" in ln]
    assert res and all(f"{DEGENERATE}: not a speedup" in ln and "| faster |" not in ln for ln in res)


def test_nothing_flagged_without_degenerate_acceptance(tmp_path):
    out = report_campaign(write_campaign(tmp_path / "c"), quiet=True)
    assert not any("ACCEPTANCE" in c for c in out.conclusions)
    assert all(r["acceptance_flag"] == "" for r in json.loads((tmp_path / "c" / "merged.json").read_text()))


@pytest.mark.parametrize("campaign,config,flag", [("h200-dummy8b", "ngram_improved", DEGENERATE),
                                                  ("h200-eagle3", "eagle3", NEAR_ZERO)])
def test_the_real_h200_files_are_flagged_by_the_core(campaign, config, flag, tmp_path):
    """The device's files, unchanged, through `fab report`'s code (no testbed wrapper)."""
    root = tmp_path / campaign
    shutil.copytree(H200 / campaign / "h200", root / "h200")
    out = report_campaign(root, quiet=True)
    assert out.merged, out.error
    words = "a LOSS, not a speedup" if flag == NEAR_ZERO else "not a speedup"
    hits = [c for c in out.conclusions if f"**{config}** on h200: {flag}, {words}" in c]
    assert [c.split(":")[1] for c in hits] == [" concurrency 1", " concurrency 16"]
    if flag == NEAR_ZERO:   # the real random-weights drafter is slower than vanilla: its cost is said
        assert all("it costs" in c for c in hits), hits
    assert not any("best" in c and config in c for c in out.conclusions), out.conclusions
    assert not any("best" in c for c in {row[0]: row[1:] for row in out.model.summary.rows}[config])
