"""Readable verdicts (issue 23): a summary matrix at the top, HTML tables that scroll, one colour per
configuration in every plot."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from specfleet.results import report_campaign  # noqa: E402
from specfleet.results.plots import _grouped_bars, _labels, palette  # noqa: E402

from campaign_builder import write_campaign  # noqa: E402


def test_summary_matrix_is_at_the_top_of_both_reports(tmp_path):
    root = write_campaign(tmp_path / "c")
    o = report_campaign(root, quiet=True)
    md = (root / "report.md").read_text()
    assert md.index("## Summary") < md.index("## Conclusions")
    assert "| configuration | concurrency 1 | concurrency 16 |" in md
    assert "| eagle3 | 2.11x (1 run) faster, best | 1.83x (1 run) faster, best |" in md
    assert "| ngram_improved | 1.18x (1 run) faster | 1.03x (1 run) no measurable difference |" in md
    html = (root / "report.html").read_text()
    assert html.index('id="summary"') < html.index('id="conclusions"')
    assert html.count('<div class="scroll"><table>') == html.count("<table>") and ".scroll { overflow-x: auto" in html
    assert o.model.summary.rows[0][0] == "eagle3"


def _colours(df, col):
    fig, ax = plt.subplots()
    df = df.copy()
    df["label"] = _labels(df)
    _grouped_bars(ax, df, "tpot_ms", "{:.1f}", colours=col)
    out = {c.get_label(): c.patches[0].get_facecolor() for c in ax.containers if c.patches}
    plt.close(fig)
    return out


def test_a_configuration_keeps_its_colour_across_plots(tmp_path):
    o = report_campaign(write_campaign(tmp_path / "c"), quiet=True)
    runs = o.tables.runs.replace({"config": {"vanilla": "a_vanilla"}})  # the baseline sorts first
    col = palette(runs.config)  # as all_plots: from every configuration of the report
    with_base, without = _colours(runs, col), _colours(runs[runs.config != "a_vanilla"], col)
    for cfg in ("eagle3", "ngram", "ngram_improved"):
        assert with_base[cfg] == without[cfg], cfg
