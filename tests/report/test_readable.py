"""Readable verdicts (issue 23): a summary matrix at the top, HTML tables that scroll, one colour per
configuration in every plot."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from specfleet.report import report_campaign  # noqa: E402
from specfleet.report.render.plots import _grouped_bars, _labels, palette  # noqa: E402

from campaign_builder import write_campaign  # noqa: E402


def test_summary_matrix_is_at_the_top_of_both_reports(tmp_path):
    root = write_campaign(tmp_path / "c")
    o = report_campaign(root, quiet=True)
    md = (root / "report.md").read_text()
    assert md.index("## Summary") < md.index("## Conclusions")
    assert "| configuration | concurrency 1 | concurrency 16 (1.0 wave) |" in md   # 16 prompts at c=16: one wave
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


def test_every_plot_of_a_report_draws_a_configuration_in_one_colour(tmp_path, monkeypatch):
    """all_plots (speedup, crossover, TPOT, acceptance): each legend entry of a configuration has the
    same colour in every plot that shows it, the baseline present in some and absent in others."""
    from matplotlib.colors import to_hex

    from specfleet.report.render import plots
    seen: dict[str, set[str]] = {}
    shown: list[int] = []
    real = plots._svg

    def record(fig, simulated=False):
        n = 0
        for ax in fig.axes:
            leg = ax.get_legend()
            for text, handle in zip(leg.get_texts() if leg else [], leg.legend_handles if leg else []):
                c = handle.get_facecolor() if hasattr(handle, "get_facecolor") and not hasattr(handle, "get_lines") \
                    else handle.get_color()
                cfg = text.get_text().split(" (")[0]
                seen.setdefault(cfg, set()).add(to_hex(c[0] if isinstance(c, list) else c))
                n += 1
        shown.append(n)
        return real(fig, simulated)

    monkeypatch.setattr(plots, "_svg", record)
    o = report_campaign(write_campaign(tmp_path / "c"), quiet=True)
    titles = [t for t, _ in plots.all_plots(o.tables.runs, o.tables.spec, "vanilla")]
    assert {"Speedup", "TPOT", "Acceptance"} <= set(titles) and sum(1 for n in shown if n) >= 3
    assert {"vanilla", "eagle3", "ngram", "ngram_improved"} <= set(seen)
    assert all(len(c) == 1 for c in seen.values()), seen
    assert len({next(iter(c)) for c in seen.values()}) == len(seen)   # and no two share one


def test_the_bullets_are_caveats_grouped_shortest_first_and_restate_no_verdict(tmp_path):
    o = report_campaign(write_campaign(tmp_path / "c"), quiet=True, gpu_bandwidth_gbps=1792, weights_gib=61.03)
    groups = [c.split(": ", 1)[0] for c in o.conclusions]
    assert set(groups) >= {"Why slower", "Cost", "Latency"}
    order = list(dict.fromkeys(groups))
    assert groups == sorted(groups, key=order.index)     # grouped: each group's bullets together
    size = {g: sum(len(c) for c in o.conclusions if c.startswith(g + ": ")) for g in order}
    assert [size[g] for g in order] == sorted(size.values())   # the shortest group first
    for g in order:
        lens = [len(c) for c in o.conclusions if c.startswith(g + ": ")]
        assert lens == sorted(lens)                               # the shortest caveat first
    # no verdict and no speedup of the summary matrix again
    r = o.tables.runs[o.tables.runs.config != "vanilla"]
    text = "\n".join(o.conclusions)
    for s in r.speedup:
        assert f"{s:.2f}x" not in text and f"{s:.3f}x" not in text, s
    assert "best is" not in text and "no measurable difference from the baseline" not in text
    assert "Noise band" not in text and "band [0.971x, 1.030x]" in o.model.summary.note
