"""Inline SVG plots (matplotlib, Agg backend) for the self-contained HTML report.

The SVG carries no external references: the <metadata> block (Dublin Core /
Creative Commons URIs) is removed, text is drawn as paths (no font needed).
When any input is simulated every plot carries the stamp: a red "SIMULATED"
watermark across the axes, "[SIMULATED]" before the title, and an SVG <title>
(text a reader, a screen reader or a test can find).
"""
from __future__ import annotations

import io
import re
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

RC = {"svg.fonttype": "path", "svg.hashsalt": "specfleet", "font.size": 9}
SIM_TITLE = "SIMULATED ENGINE: not a measurement"


def _svg(fig, simulated: bool = False) -> str:
    for ax in fig.axes if simulated else ():
        if ax.get_label() == "<colorbar>":  # a colour scale is not a plot of its own
            continue
        ax.set_title("[SIMULATED] " + ax.get_title(), color="#b00020")
        ax.text(0.5, 0.5, "SIMULATED", transform=ax.transAxes, ha="center", va="center", rotation=20,
                fontsize=34, color="#b00020", alpha=0.22, fontweight="bold", zorder=10,
                gid="simulated-stamp")
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    s = buf.getvalue()
    s = s[s.index("<svg"):]
    s = re.sub(r"<metadata>.*?</metadata>", "", s, flags=re.S)
    if simulated:
        s = re.sub(r"(<svg\b[^>]*>)", lambda m: m.group(1) + f"<title>{SIM_TITLE}</title>", s, count=1)
    return s


TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
         "#17becf")


def palette(configs) -> dict[str, str]:
    """One colour per configuration, the same in every plot of a report (sorted names, tab10)."""
    return {c: TAB10[i % len(TAB10)] for i, c in enumerate(sorted(set(configs)))}


def _labels(df: pd.DataFrame) -> pd.Series:
    multi = df.groupby("config")["node"].nunique()
    return df.apply(lambda r: f"{r.config} ({r.node})" if multi[r.config] > 1 else r.config, axis=1)


def _bar_err(vals, lo, hi) -> list[list[float]]:
    """matplotlib's (below, above) error lengths of points with their intervals (nan: none). The point
    is the interval's centre on the log scale (measures.speedup_noise: both from the runs' logs), so
    both lengths are >= 0; the clip only absorbs the last bit of float rounding."""
    below = [max(v - x, 0.0) if x == x and v == v else 0.0 for v, x in zip(vals, lo)]
    above = [max(x - v, 0.0) if x == x and v == v else 0.0 for v, x in zip(vals, hi)]
    return [below, above]


def _grouped_bars(ax, df: pd.DataFrame, col: str, fmt: str, ci: tuple[str, str] | None = None,
                  colours: dict[str, str] | None = None) -> None:
    # one group per bench cell (a plain plan's cells are its concurrencies), by concurrency
    key = "cell" if "cell" in df else "concurrency"
    concs = list(dict.fromkeys(df.sort_values(["concurrency", key])[key]))
    labels = list(dict.fromkeys(df["label"]))
    width = 0.8 / max(len(labels), 1)
    for i, lab in enumerate(labels):
        sub = df[df.label == lab].set_index(key)[col]
        xs = [k + (i - (len(labels) - 1) / 2) * width for k in range(len(concs))]
        vals = [sub.get(c, float("nan")) for c in concs]
        cfg = df[df.label == lab].config.iloc[0]
        bars = ax.bar(xs, vals, width, label=lab, color=(colours or palette(df.config)).get(cfg),
                      hatch=("//" if df.groupby("config")["node"].nunique().get(cfg, 1) > 1 and
                             list(dict.fromkeys(df[df.config == cfg].label)).index(lab) % 2 else None))
        if ci:  # the interval as an error bar where there is one
            rows = df[df.label == lab].set_index(key)
            lo = [rows[ci[0]].get(c, float("nan")) for c in concs]
            hi = [rows[ci[1]].get(c, float("nan")) for c in concs]
            err = _bar_err(vals, lo, hi)
            ax.errorbar(xs, vals, yerr=err, fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
        ax.bar_label(bars, labels=[fmt.format(v) if v == v else "" for v in vals], fontsize=7)
    plain = key == "concurrency" or all(str(c)[4:].isdigit() for c in concs)  # "conc N" ticks stand upright
    ax.set_xticks(range(len(concs)), [f"conc {c[4:]}" if key == "cell" and str(c)[4:].isdigit() else
                                      f"conc {c}" if key == "concurrency" else str(c) for c in concs],
                  rotation=0 if plain else 30, ha="center" if plain else "right")
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.margins(y=0.12)


def speedup_svg(runs: pd.DataFrame, baseline: str, simulated: bool = False,
                band: tuple[float, float] | None = None, colours: dict[str, str] | None = None) -> str | None:
    df = runs[(runs.config != baseline) & runs.speedup.notna()].copy()
    if df.empty:
        return None
    df["label"] = _labels(df)
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(7, 3.2))
        ci = ("speedup_ci_low", "speedup_ci_high") if "speedup_ci_low" in df else None
        _grouped_bars(ax, df, "speedup", "{:.2f}x", ci, colours)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        if band:  # single runs inside it are "no measurable difference"
            ax.axhspan(*band, color="grey", alpha=0.25, lw=0)
        ax.set_ylabel(f"output tok/s vs same node's {baseline}")
        ax.set_title("Speedup per configuration and concurrency"
                     + (" (bars: 95 % CI; grey: noise band)" if band else ""))
        return _svg(fig, simulated)


def crossover_svg(runs: pd.DataFrame, baseline: str, simulated: bool = False,
                  band: tuple[float, float] | None = None, colours: dict[str, str] | None = None) -> str | None:
    """Speedup vs concurrency (log x), one line per configuration (and node), the measured points
    with their intervals; only where a curve has >= 3 points (specfleet/report/tables/crossover_curve.py)."""
    from ..tables.crossover_curve import curves
    found = curves(runs, baseline)
    if not found:
        return None
    multi = {c for c, _, _ in found if sum(1 for x, _, _ in found if x == c) > 1}
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(7, 3.4))
        for cfg, node, g in found:
            x, y = list(g.concurrency), list(g.speedup)
            ax.errorbar(x, y, yerr=_bar_err(y, g.speedup_ci_low, g.speedup_ci_high), marker="o", ms=3.5, lw=1.2, capsize=2, elinewidth=0.8,
                        label=f"{cfg} ({node})" if cfg in multi else cfg,
                        color=(colours or palette(runs.config)).get(cfg))
        ax.set_xscale("log", base=2)
        concs = sorted({int(c) for _, _, g in found for c in g.concurrency})
        ax.set_xticks(concs, [str(c) for c in concs], fontsize=7)
        ax.minorticks_off()
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        if band:
            ax.axhspan(*band, color="grey", alpha=0.25, lw=0)
        ax.set_xlabel("concurrency (log scale; markers: measured points)")
        ax.set_ylabel(f"output tok/s vs same node's {baseline}")
        ax.set_title("Speedup vs concurrency (bars: 95 % CI" + ("; grey: noise band)" if band else ")"))
        ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        return _svg(fig, simulated)


def tpot_svg(runs: pd.DataFrame, simulated: bool = False, colours: dict[str, str] | None = None) -> str | None:
    if runs.empty:
        return None
    df = runs.copy()
    df["label"] = _labels(df)
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(7, 3.2))
        _grouped_bars(ax, df, "tpot_ms", "{:.1f}", colours=colours)
        ax.set_ylabel("mean TPOT (ms), lower is better")
        ax.set_title("Time per output token")
        return _svg(fig, simulated)


def acceptance_svg(spec: pd.DataFrame, simulated: bool = False, colours: dict[str, str] | None = None) -> str | None:
    df = spec[spec.has_spec_keys].copy()
    if df.empty:
        return None
    df["label"] = _labels(df)
    with plt.rc_context(RC):
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.2))
        _grouped_bars(a1, df, "acceptance_rate_pct", "{:.1f}", colours=colours)
        a1.get_legend().remove()  # same series as a2's legend, which would sit on top of a2
        a1.set_ylabel("acceptance rate (%)")
        a1.set_title("Accepted / drafted tokens")
        _grouped_bars(a2, df, "acceptance_length", "{:.2f}", colours=colours)
        a2.set_ylabel("acceptance length (tokens per draft)")
        a2.set_title("1 + accepted / drafts")
        return _svg(fig, simulated)


def category_heatmap_svg(title: str, grid: pd.DataFrame, simulated: bool = False,
                         acceptance: pd.DataFrame | None = None) -> str:
    """Configuration x category: speedup over the same node's baseline (centred on 1.0: green pays,
    red loses), each square labelled with the speedup and, where known, the acceptance length."""
    import numpy as np
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(max(5.0, 1.6 + 0.9 * grid.shape[1]), 1.4 + 0.5 * grid.shape[0]))
        vals = grid.to_numpy(dtype=float)
        span = max(0.05, float(np.nanmax(np.abs(np.log(vals))))) if np.isfinite(vals).any() else 0.1
        im = ax.imshow(np.log(vals), cmap="RdYlGn", vmin=-span, vmax=span, aspect="auto")
        for (i, j), v in np.ndenumerate(vals):
            acc = acceptance.iloc[i, j] if acceptance is not None and acceptance.shape == grid.shape else float("nan")
            text = "" if v != v else f"{v:.2f}x" + (f"\nAL {acc:.2f}" if acc == acc else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=7)
        ax.set_xticks(range(grid.shape[1]), list(grid.columns), rotation=30, ha="right")
        ax.set_yticks(range(grid.shape[0]), list(grid.index))
        cb = fig.colorbar(im, ax=ax, fraction=0.04)
        ticks = [t for t in (0.5, 0.8, 1.0, 1.25, 2.0) if abs(np.log(t)) <= span] or [1.0]
        cb.set_ticks([float(np.log(t)) for t in ticks], labels=[f"{t:g}x" for t in ticks])
        ax.set_title(f"Speedup per category, {title}\n(vs the same node's baseline; AL = acceptance length)")
        return _svg(fig, simulated)


def per_request_acceptance_svg(series: dict[str, dict[str, list[float]]], k: int, simulated: bool = False
                               ) -> str | None:
    """Histograms of the requests' acceptance lengths (acceptance_report.py), one panel per configuration
    (`series`: config -> node -> lengths), a bar of 1/4 token from 1 to k + 1, each node's median dashed."""
    if not any(v for nodes in series.values() for v in nodes.values()):
        return None
    bins = [1 + i / 4 for i in range(4 * max(1, k) + 1)]
    col = palette(n for nodes in series.values() for n in nodes)
    with plt.rc_context(RC):
        fig, axes = plt.subplots(len(series), 1, figsize=(7, 1.9 * len(series) + 0.6), squeeze=False, sharex=True)
        for ax, (cfg, nodes) in zip(axes[:, 0], sorted(series.items())):
            for node, vals in sorted(nodes.items()):
                ax.hist(vals, bins=bins, histtype="step" if len(nodes) > 1 else "bar", color=col[node],
                        label=f"{node} ({len(vals)} requests)", lw=1.2)
                ax.axvline(statistics.median(vals), color=col[node], ls="--", lw=0.9)
            ax.set_title(f"{cfg}: per-request acceptance length (untimed pass; dashed: median)")
            ax.set_ylabel("requests")
            ax.legend(fontsize=7, frameon=False, loc="upper right")
        axes[-1, 0].set_xlabel("acceptance length = 1 + accepted draft tokens / verify steps, per request")
        fig.tight_layout()
        return _svg(fig, simulated)


def namespace_ids(svg: str, prefix: str) -> str:
    """Prefix every id (and its references) so several inline SVGs can share one page."""
    ids = set(re.findall(r'\bid="([^"]+)"', svg))
    if not ids:
        return svg
    pat = re.compile(r'(\bid="|href="#|url\(#)(' + "|".join(map(re.escape, sorted(ids, key=len, reverse=True))) + r')(?=[")])')
    return pat.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", svg)


def category_plots(categories: pd.DataFrame | None, baseline: str, simulated: bool = False) -> list[tuple[str, str]]:
    """One heatmap per (concurrency, output_len) of the per-category cells (categories.heatmap_grid)."""
    from ..tables.categories import heatmap_grid
    if categories is None or "acceptance_length" not in categories:
        return []
    acc = dict(heatmap_grid(categories, baseline, "acceptance_length"))
    return [(f"Categories, {where}", category_heatmap_svg(where, grid, simulated,
                                                          acc.get(where, pd.DataFrame()).reindex_like(grid)))
            for where, grid in heatmap_grid(categories, baseline)]


def all_plots(runs: pd.DataFrame, spec: pd.DataFrame, baseline: str,
              simulated: bool = False, band: tuple[float, float] | None = None,
              categories: pd.DataFrame | None = None) -> list[tuple[str, str]]:
    out = []
    col = palette(runs.config)  # one colour per configuration in every plot
    for title, svg in (("Speedup", speedup_svg(runs, baseline, simulated, band, col)),
                       ("Crossover", crossover_svg(runs, baseline, simulated, band, col)),
                       ("TPOT", tpot_svg(runs, simulated, col)),
                       ("Acceptance", acceptance_svg(spec, simulated, col)),
                       *category_plots(categories, baseline, simulated)):
        if svg:
            out.append((title, namespace_ids(svg, f"sf{len(out)}")))
    return out
