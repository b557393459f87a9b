"""`fab compare`'s outputs: compare.md, compare.html (the plot inlined), compare.svg, compare.json.

One model (`CompareModel`: stamps, summary lines, sections of title, headers, rows of formatted strings
and note) feeds the Markdown and HTML templates in templates/compare/, through the report's Jinja
environments (document.page_environments: HTML autoescaped, control characters and Markdown's HTML
shown as text), so they never disagree. Simulated inputs stamp every output and the plot.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from ...worker.layout import PROVENANCE
from ..tables.compare_policy import (FAMILY_ALPHA, IMPROVEMENT, LOWER_IS_BETTER, POWER, REGRESSION, UNDECIDABLE,
                                     single_run_statement)
from .comparison import Comparison
from ..render.document import SIMULATED_STAMP, Section, fmt, page_environments
from ...bastion_io import AtomicFiles
from ...render import TEMPLATES
from ..gates.gate import GATE_METRICS

TEMPLATE_DIR = TEMPLATES / "compare"
FORCED_STAMP = "FORCED: compared with --force although {why}."


def stamps(c: Comparison) -> list[str]:
    out = [SIMULATED_STAMP] if c.simulated else []
    if c.forced:
        why = "; ".join(c.refused) or "a side's node-equivalence gate failed"
        out.append(FORCED_STAMP.format(why=why))
    return out


def _pct(r: float | None) -> str:
    return "–" if r is None or (isinstance(r, float) and math.isnan(r)) else f"{(r - 1) * 100:+.2f} %"


def _word(verdict: str) -> str:
    """A regression shouts in the tables, and so does a figure that could not be judged."""
    return verdict.upper() if verdict in (REGRESSION, UNDECIDABLE) else verdict


def _p(v: float | None) -> str:
    return "–" if v is None else f"{v:.2g}"


def _detectable(v: float | None, better_up: bool = True) -> str:
    """The worsening found with 80 % power: a drop of what is better up, a rise of a latency."""
    return "not measurable: 1 run" if v is None else f"{v:.1f} % {'lower' if better_up else 'higher'}"


def sections(c: Comparison) -> list[Section]:
    secs = [Section("Provenance differences", ["what", "baseline", "candidate"],
                    [list(r) for r in c.provenance],
                    f"Node facts (result metadata, {PROVENANCE}) and result facts that differ between the "
                    "campaigns, values over every node of a side; the run dates always.")]
    if c.plan_compared or c.plan_other or c.base.plan is None or c.cand.plan is None:
        rows = [[k, a, b, "compared (vLLM version, name, server flag)"] for k, a, b in c.plan_compared]
        rows += [[k, a, b, "OTHER: not what a comparison is for"] for k, a, b in c.plan_other]
        secs.append(Section("Plan differences", ["field", "baseline", "candidate", "kind"], rows,
                            "From each side's plan.json; assertions are not part of the plan hash and not "
                            "listed. An OTHER difference may be what moved the figures."
                            if c.base.plan and c.cand.plan else "not checked: a side has no plan.json"))
    for metric in dict.fromkeys(d.metric for d in c.cells):
        rows = [d for d in c.cells if d.metric == metric]
        secs.append(Section(f"Per cell: {GATE_METRICS[metric]}, candidate / baseline",
                            ["config", "conc", "cell", "baseline", "candidate", "n", "change", "CI low", "CI high",
                             "p (worse)", "Holm p", "verdict", "detectable worsening", "why"],
                            [[d.config, str(d.concurrency), d.cell, fmt(d.base_mean), fmt(d.cand_mean),
                              f"{d.n_base}/{d.n_cand}", _pct(d.ratio), _pct(d.ci_low), _pct(d.ci_high),
                              _p(d.judged.p_worse), _p(d.judged.p_adjusted), _word(d.verdict),
                              _detectable(d.judged.detectable_pct, d.metric not in LOWER_IS_BETTER), d.detail] for d in rows],
                            f"Means over every run of the cell on every node of a side. {rule_text(c)}"))
    if c.rates:
        secs.append(Section("Open-loop cells: offered vs achieved rate",
                            ["config", "cell", "baseline achieved", "baseline sustained", "candidate achieved",
                             "candidate sustained"], c.rates,
                            "At a set request rate output tok/s is the offered load on both sides below "
                            "saturation: these cells are judged on TTFT and the per-token metric (and goodput "
                            "with an SLO), not on throughput. Achieved = completed / duration; a run sustained "
                            "its rate when it ended within 10 % of its arrivals' span plus one unloaded request "
                            "(docs/report.md, \"Open-loop cells\"); one that did not measured a growing queue."))
    if c.speedups:
        secs.append(Section("Speedup vs the baseline configuration, and acceptance, per configuration",
                            ["config", "conc", "cell", "speedup before", "speedup after", "change", "CI low",
                             "CI high", "Holm p", "verdict", "detectable worsening", "acceptance % before", "after",
                             "acceptance length before", "after"],
                            [[s.config, str(s.concurrency), s.cell, fmt(s.base_speedup, 3, "x"),
                              fmt(s.cand_speedup, 3, "x"), _pct(s.ratio), _pct(s.ci_low), _pct(s.ci_high),
                              _p(s.judged.p_adjusted), _word(s.verdict), _detectable(s.judged.detectable_pct),
                              fmt(s.base_accept_pct, 1), fmt(s.cand_accept_pct, 1),
                              fmt(s.base_accept_len, 3), fmt(s.cand_accept_len, 3)] for s in c.speedups],
                            "Speedup = output tok/s over the same campaign's baseline configuration (means over "
                            "nodes). Change = the ratio of the two speedups on geometric means, its interval "
                            "from the four groups of runs (Welch-Satterthwaite on log values); verdicts as "
                            "per cell. Acceptance from the spec_decode_* keys, pooled per side."))
    if c.goodput:
        secs.append(goodput_section(c))
    if c.assertions:
        secs.append(Section("Assertions (the candidate's plan)", ["assertion", "state", "detail"],
                            [[a.assertion.describe(), a.state, a.detail] for a in c.assertions]))
    return secs


def _pp(v: float) -> str:
    return f"{v:+.1f} pp"


def goodput_section(c: Comparison) -> Section:
    rows = [[g.config, str(g.concurrency), g.cell, fmt(g.base_goodput, 3), fmt(g.cand_goodput, 3),
             f"{g.n_base}/{g.n_cand}", _pct(g.ratio), _pct(g.ci_low), _pct(g.ci_high), _p(g.judged.p_adjusted),
             _word(g.verdict),
             f"{g.base_attainment_pct:.1f} % of {g.base_requests}",
             f"{g.cand_attainment_pct:.1f} % of {g.cand_requests}", _pp(g.attainment_change_pp),
             f"[{_pp(g.attainment_low_pp)}, {_pp(g.attainment_high_pp)}]", _p(g.attainment.p_adjusted),
             _word(g.attainment_verdict),
             ("yes" if g.base_meets else "NO") + " -> " + ("yes" if g.cand_meets else "NO"), g.method]
            for g in c.goodput]
    return Section("Goodput under the SLO, candidate / baseline",
                   ["config", "conc", "cell", "goodput req/s before", "after", "n", "change", "CI low", "CI high",
                    "Holm p", "goodput verdict", "within SLO before", "after", "attainment change", "95 % interval",
                    "Holm p", "attainment verdict", "meets SLO", "method"], rows,
                   f"SLO: {c.slo}. Goodput = good requests / duration per run, from the per-request arrays, both "
                   "sides judged by this SLO; its change and verdict by the per-cell rule. A run with goodput 0 has "
                   "no log value: that cell's goodput verdict is its attainment's. Attainment = good / completed "
                   "requests pooled over a side's runs; change in percentage points with Newcombe's hybrid score "
                   f"interval ({c.noise.confidence:.0%}, defined at 0 % and 100 %); its one-sided p against "
                   f"±{c.noise.tolerance_pct:g} points by inverting that interval, in the same Holm family as the "
                   "cells; within tolerance when the interval excludes 0. It treats requests as independent trials, which requests sharing a server under "
                   "load are not: with runs that differ it is too narrow.")


def rule_text(c: Comparison) -> str:
    lo, hi = c.noise.band
    single = (single_run_statement(c.noise.tolerance_pct, c.family or len(c.cells))
              if c.single_run_threshold else
              f"with one run on a side there is no noise estimate and no test: {UNDECIDABLE.upper()}")
    return (f"Verdict: each figure is a one-sided Welch t-test on log values of 'no worse (better) than the "
            f"±{c.noise.tolerance_pct:g} % band [{lo:.4f}, {hi:.4f}]'; regression / improvement when its "
            f"Holm-adjusted p over the comparison's {c.family} tested figures (cells x metrics, speedups, "
            f"goodput, SLO attainment) is <= {FAMILY_ALPHA:g}: the chance that campaigns with no change beyond "
            f"the band report any regression is <= {FAMILY_ALPHA * 100:g} %. 'within tolerance' when the "
            f"{c.noise.confidence:.0%} interval excludes no change but the test does not clear the band; "
            f"otherwise no measurable difference; {single}. Detectable worsening: the true change beyond which "
            f"the figure is called a regression with {POWER * 100:g} % power at its measured noise (Holm's strictest "
            f"level, alpha/{c.family or 1}).")


def family_line(c: Comparison) -> str:
    """The summary's statement of the error rate the verdicts hold to."""
    line = (f"family-wise false-alarm rate <= {FAMILY_ALPHA * 100:g} % over {c.family} tested figure(s) "
            "(one-sided tests on log values against the band, Holm)")
    if c.single_run_threshold and any("single run: plain threshold" in (d.detail or "") for d in c.cells):
        line += "; single runs on the plain threshold, accepted: " + single_run_statement(
            c.noise.tolerance_pct, sum("single run" in d.detail for d in c.cells))
    return line


def summary(c: Comparison) -> list[str]:
    out = [f"baseline: {c.base.dir} ({c.base.camp.name}); candidate: {c.cand.dir} ({c.cand.camp.name})"]
    imp = [d for d in c.cells if d.verdict == IMPROVEMENT]
    cells = {(d.config, d.cell) for d in c.cells}
    out.append(f"{len(cells)} cells compared on {', '.join(GATE_METRICS[m] for m in c.metrics)} "
               f"({len(c.cells)} figures): {len(c.regressions)} regression(s), {len(imp)} improvement(s); "
               f"{len(c.speedup_regressions)} speedup regression(s)")
    out.append(family_line(c))
    for d in c.regressions:
        out.append(f"REGRESSION: {d.config} @ {d.cell} {GATE_METRICS[d.metric]}: {_pct(d.ratio)} ({d.method}, "
                   f"interval [{_pct(d.ci_low)}, {_pct(d.ci_high)}]; {d.detail})")
    for s in c.speedup_regressions:
        out.append(f"REGRESSION: {s.config} @ {s.cell}: speedup {s.base_speedup:.3f}x -> {s.cand_speedup:.3f}x "
                   f"({_pct(s.ratio)}, interval [{_pct(s.ci_low)}, {_pct(s.ci_high)}])")
    if c.goodput:
        out.append(f"{len(c.goodput)} cells compared on goodput under the SLO ({c.slo}): "
                   f"{len(c.goodput_regressions)} regression(s)")
    for g in c.goodput_regressions:
        what = [f"goodput {_pct(g.ratio)}" + (f" (interval [{_pct(g.ci_low)}, {_pct(g.ci_high)}])"
                                               if g.ci_low is not None else f" ({g.method})")] \
            if g.verdict == REGRESSION else []
        if g.attainment_verdict == REGRESSION:
            what.append(f"SLO attainment {g.base_attainment_pct:.1f} % -> {g.cand_attainment_pct:.1f} % "
                        f"(interval [{_pp(g.attainment_low_pp)}, {_pp(g.attainment_high_pp)}])")
        out.append(f"REGRESSION: {g.config} @ {g.cell} under the SLO: {'; '.join(what)}")
    if c.undecidable:
        out.append(f"{UNDECIDABLE.upper()}: {len(c.undecidable)} figure(s) have one run on a side, no noise "
                   f"estimate, no verdict ({', '.join(c.undecidable[:6])}{' ...' if len(c.undecidable) > 6 else ''}); "
                   "--single-run-threshold judges them on the plain threshold at the false-alarm rate it states")
    for a in c.assertions:
        out.append(a.line())
    out += c.unmatched + c.notes
    if not (c.regressions or c.speedup_regressions or c.goodput_regressions):
        out.append("no regression" + (" among the figures that could be judged" if c.undecidable else ""))
    return out


def plot_svg(c: Comparison) -> str | None:
    if not c.cells:
        return None
    from ..render.plots import RC, _svg, plt  # matplotlib, Agg, the report's SVG settings and SIMULATED stamp

    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(7, 0.35 * len(c.cells) + 1.2))
        ys = list(range(len(c.cells)))[::-1]
        vals = [(d.ratio - 1) * 100 for d in c.cells]
        lo = [0 if d.ci_low is None else (d.ratio - d.ci_low) * 100 for d in c.cells]
        hi = [0 if d.ci_high is None else (d.ci_high - d.ratio) * 100 for d in c.cells]
        colours = ["#b00020" if d.verdict == REGRESSION else "#1b7a2b" if d.verdict == IMPROVEMENT else "#555"
                   for d in c.cells]
        ax.barh(ys, vals, color=colours, height=0.6)
        ax.errorbar(vals, ys, xerr=[lo, hi], fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
        b_lo, b_hi = c.noise.band
        ax.axvspan((b_lo - 1) * 100, (b_hi - 1) * 100, color="grey", alpha=0.25, lw=0)
        ax.axvline(0, color="black", lw=0.8)
        ax.set_yticks(ys, [f"{d.config} @ {d.cell} {GATE_METRICS[d.metric]}" for d in c.cells])
        ax.set_xlabel("candidate vs baseline, % (latencies: up is slower)")
        ax.set_title("Candidate vs baseline per cell (bars: 95 % CI; grey: tolerance band)")
        return _svg(fig, c.simulated)


@dataclass
class CompareModel:
    """What compare.md and compare.html show (templates/compare/), as the report's ReportModel: the two
    campaigns' names, the stamps, the summary's lines and the sections."""

    baseline: str
    candidate: str
    stamps: list[str]
    tags: list[str]          # the HTML title's [TAG]s
    summary: list[str]
    sections: list[Section]


def build_model(c: Comparison) -> CompareModel:
    return CompareModel(baseline=c.base.camp.name, candidate=c.cand.camp.name, stamps=stamps(c),
                        tags=["SIMULATED"] if c.simulated else [], summary=summary(c), sections=sections(c))


def to_markdown(m: CompareModel, image: str | None) -> str:
    return page_environments(TEMPLATE_DIR)[1].get_template("compare.md.j2").render(m=m, image=image)


def to_html(m: CompareModel, svg: str | None) -> str:
    return page_environments(TEMPLATE_DIR)[0].get_template("compare.html.j2").render(m=m, svg=svg) + "\n"


def _no_nan(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _no_nan(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_no_nan(x) for x in v]
    return v


def to_json(c: Comparison) -> str:
    """compare.json: the same figures for machines (NaN written as null)."""
    data = {
        "schema_version": 2, "baseline": str(c.base.dir), "candidate": str(c.cand.dir), "metrics": c.metrics,
        "family_size": c.family, "family_alpha": FAMILY_ALPHA, "single_run_threshold": c.single_run_threshold,
        "undecidable": c.undecidable,
        "simulated": c.simulated, "forced": c.forced, "stamps": stamps(c), "refused": c.refused,
        "tolerance_pct": c.noise.tolerance_pct, "confidence": c.noise.confidence,
        "provenance_differences": [dict(zip(("what", "baseline", "candidate"), r)) for r in c.provenance],
        "plan_differences": [dict(zip(("field", "baseline", "candidate"), r), kind=k)
                             for k, rows in (("compared", c.plan_compared), ("other", c.plan_other)) for r in rows],
        "cells": [dict(asdict(d), verdict=d.verdict) for d in c.cells], "unmatched": c.unmatched,
        "speedups": [dict(asdict(s), verdict=s.verdict) for s in c.speedups],
        "slo": c.slo or None, "goodput": [dict(asdict(g), regressed=g.regressed, verdict=g.verdict,
                                                  attainment_verdict=g.attainment_verdict) for g in c.goodput],
        "assertions": [{"assertion": a.assertion.describe(), "state": a.state, "detail": a.detail}
                       for a in c.assertions],
        "open_loop_rates": [dict(zip(("config", "cell", "baseline_achieved", "baseline_sustained",
                                      "candidate_achieved", "candidate_sustained"), r)) for r in c.rates],
        "notes": c.notes}
    return json.dumps(_no_nan(data), indent=1, allow_nan=False, default=str) + "\n"


def write_outputs(c: Comparison, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    model, svg = build_model(c), plot_svg(c)
    paths = {"md": out_dir / "compare.md", "html": out_dir / "compare.html", "json": out_dir / "compare.json"}
    # written as a set (bastion_io.AtomicFiles), as the report: a full disk half-way leaves the earlier ones whole
    with AtomicFiles() as files:
        if svg:
            paths["svg"] = out_dir / "compare.svg"
            files.tmp(paths["svg"]).write_text(svg, encoding="utf-8")
        files.tmp(paths["md"]).write_text(to_markdown(model, "compare.svg" if svg else None), encoding="utf-8")
        files.tmp(paths["html"]).write_text(to_html(model, svg), encoding="utf-8")
        files.tmp(paths["json"]).write_text(to_json(c), encoding="utf-8")
        files.commit()
    return paths
