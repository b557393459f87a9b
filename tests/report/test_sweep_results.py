"""Results of plans that sweep: merged per bench cell, paired with the same node's baseline in the
same cell, the per-category table and its heatmap, planned cells and the gate per cell."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specfleet.report.scan.folder import Expect, scan_folder
from specfleet.report.gates.gate import EquivalenceRule, check_equivalence
from specfleet.report.tables.merge import build_tables
from specfleet.report.render.plots import category_plots

from campaign_builder import GPU_LOG, result_json

# (host, config, cell) -> output tok/s, acceptance length (None: no spec keys); chosen so that a
# pairing across cells or nodes would give other speedups than the same-cell one
CELLS = {
    ("w1", "vanilla", "conc1-cat_summarization"): (20.0, None),
    ("w1", "vanilla", "conc1-cat_rag"): (10.0, None),
    ("w2", "vanilla", "conc1-cat_summarization"): (21.0, None),
    ("w2", "vanilla", "conc1-cat_rag"): (11.0, None),
    ("w1", "ngram", "conc1-cat_summarization"): (30.0, 2.5),
    ("w1", "ngram", "conc1-cat_rag"): (25.0, 3.0),
    ("w2", "eagle3", "conc1-cat_summarization"): (42.0, 2.2),
    ("w2", "eagle3", "conc1-cat_rag"): (16.5, 1.9),
}


def write(root: Path, cells=CELLS) -> Path:
    for (host, cfg, cell), (out, alen) in cells.items():
        hdir = root / host
        hdir.mkdir(parents=True, exist_ok=True)
        spec = (50.0, alen, 100, round((alen - 1) * 100)) if alen else None
        d = result_json((out, out * 1.2, 40.0, 80.0, 40.0, 100.0), spec, 1,
                        {"node": host, "config": cfg, "plan_hash": "abc", "category": cell.partition("cat_")[2]})
        (hdir / f"{cfg}_{cell}.json").write_text(json.dumps(d))
        (hdir / f"{cfg}.done").write_text("")
        (hdir / f"{cfg}.server.log").write_text(GPU_LOG)
    return root


def test_cells_merge_with_the_same_cells_baseline_on_the_same_node(tmp_path):
    camp = scan_folder(write(tmp_path / "c"))
    assert not camp.warnings and not camp.quarantined
    t = build_tables(camp, "vanilla")
    got = {(r.node, r.config, r.cell): r.speedup for r in t.runs.itertuples()}
    assert got[("w1", "ngram", "conc1-cat_rag")] == pytest.approx(25.0 / 10.0)
    assert got[("w2", "eagle3", "conc1-cat_summarization")] == pytest.approx(42.0 / 21.0)
    assert set(t.runs.category) == {"summarization", "rag"}
    cat = t.categories
    row = cat[(cat.config == "ngram") & (cat.category == "rag")].iloc[0]
    assert row.speedup == pytest.approx(2.5) and row.acceptance_length == pytest.approx(3.0)
    run = t.runs[(t.runs.config == "ngram") & (t.runs.cell == "conc1-cat_rag")].iloc[0]
    assert row.drafts_per_step == pytest.approx(100 / (run.output_tokens - 200))  # drafts / (out - accepted)
    assert not any("per-category table skipped" in n for n in t.notes)


def test_heatmap_is_configuration_by_category_and_stamped_when_simulated(tmp_path):
    t = build_tables(scan_folder(write(tmp_path / "c")), "vanilla")
    plots = category_plots(t.categories, "vanilla", simulated=True)
    assert len(plots) == 1 and plots[0][0] == "Categories, concurrency 1"
    svg = plots[0][1]
    assert "<title>SIMULATED ENGINE: not a measurement</title>" in svg
    assert "SIMULATED" not in category_plots(t.categories, "vanilla", simulated=False)[0][1]


def test_gate_compares_the_baseline_cell_by_cell(tmp_path):
    camp = scan_folder(write(tmp_path / "c"))
    gate = check_equivalence(camp, EquivalenceRule(metric="output_throughput", concurrency=1, tolerance_pct=3.0),
                              "vanilla")
    # summarization differs by 5 %, rag by 10 %: each cell is its own check, none pooled
    assert sorted(c.cell for c in gate.checks) == ["conc1-cat_rag", "conc1-cat_summarization"]
    assert not gate.passed and all(not c.passed for c in gate.checks)
    assert "(cell conc1-cat_rag)" in gate.summary()


def test_a_cell_that_asks_other_prompts_is_judged_by_its_own_count(tmp_path):
    root = write(tmp_path / "c", {("w1", "vanilla", "conc1-n8"): (20.0, None)})
    res = json.loads((root / "w1/vanilla_conc1-n8.json").read_text())
    res.update(completed=8, num_prompts=8)
    (root / "w1/vanilla_conc1-n8.json").write_text(json.dumps(res))
    ok = scan_folder(root, quarantine=False, expect=Expect(16, 0, {"conc1-n8": 8}))
    assert len(ok.runs) == 1 and not ok.quarantined
    wrong = scan_folder(root, quarantine=False, expect=Expect(16, 0))
    assert not wrong.runs and "8 of 16 requests were never sent: the run asked for 8" in wrong.quarantined[0].reason


def test_conclusions_compare_each_cell_with_its_own_baseline(tmp_path):
    from specfleet.report.tables.conclusions import conclusions
    t = build_tables(scan_folder(write(tmp_path / "c")), "vanilla")
    text = "\n".join(conclusions(t, "vanilla"))
    # rag: ngram 25 vs its own cell's 10 tok/s -> 2.50x; pairing with summarization's 20 would say 1.25x
    rag = t.runs[(t.runs.config == "ngram") & (t.runs.cell == "conc1-cat_rag")].iloc[0]
    assert rag.speedup == pytest.approx(2.5) and rag.speedup_verdict == "faster"
    from specfleet.report.render.document import summary_section
    sec = summary_section(t.runs, "vanilla")
    col = sec.headers.index("concurrency 1, cell conc1-cat_rag")
    ngram = next(row for row in sec.rows if row[0] == "ngram")
    assert ngram[col].startswith("2.50x") and "best" in ngram[col]
    assert "2.50" not in text      # the caveats do not restate it
