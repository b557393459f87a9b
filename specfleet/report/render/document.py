"""Write the report (report.md, report.html, merged.csv, merged.json) and print
the main tables to the terminal with rich.

Both templates render the same list of sections (title, note, headers, rows
of already formatted strings) so Markdown and HTML never disagree. Stamps
(simulated inputs, forced merge of non-equivalent nodes) go at the top of every
output; in merged.csv / merged.json they are the first column `stamp` of every
row, so the files stay loadable with pandas.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
import pandas as pd

from ...render import TEMPLATES, environment
from ..scan.cells import CellState
from ..gates.gate import GateResult
from ..tables.categories import heatmap_grid
from ..tables.conclusions import answer, best_rows
from ..tables.diagnosis import MIN_WAVES
from ..tables.measures import ACCEPTANCE_FLAGS, NEAR_ZERO, NoiseBand, cell_order, cell_title, latency_sections
from ..tables.merge import Tables
from .plots import all_plots, category_plots
from ..scan.provenance import provenance_sections
from ...bastion_io import AtomicFiles

# merged.json / merged.csv: every row carries it; docs/schemas/merged.schema.json describes that version
MERGED_SCHEMA_VERSION = 1
TEMPLATE_DIR = TEMPLATES / "report"
SIMULATED_STAMP = ("SIMULATED ENGINE: inputs come from the simulated vLLM (specfleet-simvllm), "
                   "not a real GPU run. These numbers are not performance measurements.")
NOT_EQUIVALENT_STAMP = ("NODES NOT EQUIVALENT: merged with --force although the node-equivalence gate did not pass "
                        "(FAILED, or INCONCLUSIVE: the data could not show the nodes equivalent).")
MIXED_PROVENANCE_STAMP = ("MIXED PROVENANCE: merged with --force although the runs differ in GPU model, driver, "
                          "CUDA, torch, vLLM version, decoding or prompt template (see 'Gate decision').")
MIXED_PLANS_STAMP = "MIXED PLANS: merged with --force although the results carry different plan hashes."
CATEGORY_IMAGE = "category-heatmap"  # <name>-<k>.svg beside report.md, one per (concurrency, output_len)
INCOMPLETE_STAMP = "INCOMPLETE: {n} of {total} planned cells are not merged (see 'Planned cells')."



@dataclass
class Section:
    title: str
    headers: list[str]
    rows: list[list[str]]
    note: str = ""
    anchor: str = ""
    images: list[str] = field(default_factory=list)  # files beside report.md (report.html inlines them)
    # image name -> its SVG, for figures drawn from the runs rather than the tables (the telemetry
    # timeline): write_report writes each beside report.md and report.html inlines it in this section
    figures: dict[str, str] = field(default_factory=dict)


@dataclass
class ReportModel:
    campaign: str
    baseline: str
    stamps: list[str]
    tags: list[str]
    gate: GateResult
    conclusions: list[str]
    sections: list[Section]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    gate_verdict: str = ""       # PASSED | FAILED | NOT CHECKED, with why when not all was checked
    summary: Section | None = None  # configuration x concurrency: speedup, interval, verdict (top of the report)
    gate_telemetry: list[str] = field(default_factory=list)  # a failed gate: each node's telemetry (telemetry.py)
    answer: list[str] = field(default_factory=list)  # the report's first lines (conclusions.answer)


def gate_verdict(gate: GateResult, cells: list[CellState] | None = None) -> str:
    """The gate's one-line verdict. "NOT CHECKED (why)" when no pair of nodes could be compared (a
    pass needs a comparison); planned nodes whose baseline cell at the rule's point is not merged
    are named with the cell's why."""
    if not gate.passed:
        return gate.verdict
    head = gate.verdict  # PASSED, or PASSED (UNVERIFIED: ...)
    conc = gate.rule.concurrency
    lacking = {}
    for c in cells or []:
        if c.config == gate.baseline and (conc is None or c.concurrency == conc) and not c.merged:
            lacking.setdefault(c.node, f"{c.node} has no valid '{gate.baseline}' run at concurrency "
                                       f"{c.concurrency} ({c.state}: {c.why})")
    if not gate.checks:
        why = gate.notes or [f"no two nodes have a valid '{gate.baseline}' run to compare"]
        return f"NOT CHECKED ({'; '.join(why + list(lacking.values()))})"
    if lacking:
        compared = sorted({n for c in gate.checks for n in (c.node_a, c.node_b)})
        return (f"{head} for {', '.join(compared)}; NOT CHECKED for {', '.join(sorted(lacking))} "
                f"({'; '.join(lacking.values())})")
    return head


def fmt(v: Any, nd: int = 2, suffix: str = "") -> str:
    if v is None or v == "" or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        if float(v).is_integer() and nd == 0:
            return f"{int(v):,}{suffix}"
        return f"{v:,.{nd}f}{suffix}"
    return str(v)


def _section(title: str, df: pd.DataFrame, cols: list[tuple[str, str, int, str]], note: str = "") -> Section:
    """cols: (column, header, decimals (-1 = text), suffix)."""
    rows = [[(str(r[c]) if nd < 0 else fmt(r[c], nd, suf)) for c, _, nd, suf in cols]
            for _, r in df.iterrows()]
    return Section(title, [h for _, h, _, _ in cols], rows, note,
                   anchor="".join(ch if ch.isalnum() else "-" for ch in title.lower()))


RUN_COLS = [("config", "config", -1, ""), ("node", "node", -1, ""), ("output_tok_s", "out tok/s", 2, ""),
            ("speedup", "speedup", 2, "x"), ("speedup_ci_low", "CI low", 3, "x"), ("speedup_ci_high", "CI high", 3, "x"),
            ("speedup_verdict", "vs baseline", -1, ""), ("total_tok_s", "total tok/s", 2, ""), ("tpot_ms", "TPOT ms", 2, ""),
            ("ttft_ms", "TTFT ms", 2, ""), ("itl_ms", "ITL ms", 2, ""), ("duration_s", "duration s", 2, ""),
            ("output_tokens", "out tokens/run", 0, ""), ("repeats", "runs", 0, ""),
            ("output_tok_s_std", "out tok/s sd", 2, "")]
SPEC_COLS = [("config", "config", -1, ""), ("concurrency", "conc", 0, ""), ("node", "node", -1, ""),
             ("acceptance_rate_pct", "acceptance rate", 1, " %"), ("acceptance_length", "acceptance length", 3, ""),
             ("drafts", "drafts", 0, ""), ("draft_tokens", "draft tokens", 0, ""),
             ("accepted_tokens", "accepted tokens", 0, ""), ("drafts_per_step", "drafts / step", 3, "")]
GATE_COLS = [("concurrency", "conc", 0, ""), ("metric", "metric", -1, ""), ("node_a", "node A", -1, ""),
             ("node_b", "node B", -1, ""), ("value_a", "A", 2, ""), ("value_b", "B", 2, ""),
             ("diff_pct", "diff", 2, " %"), ("n_a", "n A", 0, ""), ("n_b", "n B", 0, ""),
             ("ci_low_pct", "CI low", 2, " %"), ("ci_high_pct", "CI high", 2, " %"),
             ("rule", "rule", -1, ""), ("verdict", "verdict", -1, "")]
KV_COLS = [("node", "node", -1, ""), ("config", "config", -1, ""), ("device", "device", -1, ""),
           ("weights_gib", "weights GiB", 2, ""), ("kv_budget_gib", "KV budget GiB", 2, ""),
           ("kv_tokens", "KV tokens", 0, ""), ("tokens_per_request", "tokens/request", 0, ""),
           ("max_concurrency_x", "max concurrency", 2, "x"), ("max_measured_conc", "max conc run", 0, ""),
           ("worst_case_kv_demand_pct", "worst-case KV demand", 1, " %")]
BW_COLS = [("concurrency", "conc", 0, ""), ("config", "config", -1, ""), ("node", "node", -1, ""),
           ("tpot_ms", "TPOT ms", 2, ""), ("bound_tpot_ms", "bound TPOT ms", 2, ""),
           ("fraction_of_bound", "bound / TPOT", 2, "")]
BW_GIVEN_COLS = [("bandwidth_gbps", "GB/s used", 0, ""), ("datasheet_gbps", "GB/s datasheet", 0, ""),
                 ("datasheet_bound_tpot_ms", "datasheet bound ms", 2, ""), ("datasheet_fraction", "datasheet bound / TPOT", 2, "")]
BW_FLAG_COL = ("acceptance_flag", "flag", -1, "")   # shown only when a row is flagged (measures.acceptance_flag)
CAT_COLS = [("concurrency", "conc", 0, ""), ("category", "category", -1, ""), ("config", "config", -1, ""),
            ("node", "node", -1, ""), ("requests", "requests", 0, ""), ("tpot_ms", "TPOT ms", 2, ""),
            ("tpot_speedup", "TPOT speedup", 2, "x")]
# per-category bench cells (categories.py): exact server counters per category
CATCELL_COLS = [("category", "category", -1, ""), ("config", "config", -1, ""), ("node", "node", -1, ""),
                ("concurrency", "conc", 0, ""), ("cell", "cell", -1, ""), ("completed", "requests", 0, ""),
                ("acceptance_rate_pct", "acceptance rate", 1, " %"), ("acceptance_length", "acceptance length", 3, ""),
                ("drafts_per_step", "drafts / step", 3, ""), ("output_tok_s", "out tok/s", 2, ""),
                ("speedup", "speedup", 2, "x"), ("speedup_ci_low", "CI low", 3, "x"),
                ("speedup_ci_high", "CI high", 3, "x"), ("speedup_verdict", "vs baseline", -1, "")]
CELL_COLS = [("config", "config", -1, ""), ("concurrency", "conc", 0, ""), ("node", "node", -1, ""),
             ("state", "state", -1, ""), ("runs", "runs", -1, ""), ("why", "why", -1, "")]


def _flag_verdicts(rows: pd.DataFrame) -> pd.DataFrame:
    """'vs baseline' of a flagged row says what it is (measures.acceptance_flag), not faster/slower."""
    if "acceptance_flag" not in rows or not rows.acceptance_flag.isin(ACCEPTANCE_FLAGS).any():
        return rows
    out = rows.copy()
    hit = out.acceptance_flag.isin(ACCEPTANCE_FLAGS)
    out.loc[hit, "speedup_verdict"] = out.loc[hit, "acceptance_flag"].map(flag_words)
    return out


def flag_words(flag: str) -> str:
    """What a flagged row is instead of faster/slower: NEAR-ZERO acceptance only costs (each step drafts
    and verifies for ~1 token), so it is a loss."""
    return f"{flag}: a loss, not a speedup" if flag == NEAR_ZERO else f"{flag}: not a speedup"


def _verdict_cell(r: pd.Series, best: bool = False) -> str:
    if r.get("acceptance_flag") in ACCEPTANCE_FLAGS:
        return f"{fmt(r.speedup, 2, 'x')} {flag_words(r.acceptance_flag)}"
    if r.speedup != r.speedup:
        return "no same-node baseline"
    lo, hi = r.get("speedup_ci_low"), r.get("speedup_ci_high")
    ci = f" [{lo:.2f}-{hi:.2f}]" if lo == lo and lo is not None and hi == hi else f" ({fmt(r.repeats, 0)} run)"
    return f"{r.speedup:.2f}x{ci} {r.speedup_verdict}" + (", best" if best else "")


def _wave_mark(rows: pd.DataFrame) -> str:
    """' (1.0 wave)' on a cell whose runs are few waves (diagnosis.MIN_WAVES, read from the files)."""
    w = rows.waves.min() if "waves" in rows else math.nan
    return f" ({w:.1f} wave{'s' if w != 1 else ''})" if w == w and w < MIN_WAVES else ""


def summary_section(runs: pd.DataFrame, baseline: str, repeats_note: str | None = None,
                    noise: NoiseBand | None = None, top_notes: list[str | None] = ()) -> Section | None:
    """One row per configuration, one column per bench cell: speedup, interval (or 1 run), verdict,
    'best' on the fastest measurably faster one of a cell: every verdict of the report. A cell of few
    waves is marked in its heading; `top_notes` (the waves and report-setup notes) open the caption."""
    others = runs[runs.config != baseline]
    if others.empty:
        return None
    best = set(best_rows(runs, baseline).index) if "acceptance_flag" in runs else set()
    cells = cell_order(runs)
    heads = [cell_title(runs[runs.cell == c]).removeprefix("at ") + _wave_mark(runs[runs.cell == c]) for c in cells]
    multi = others.groupby("config").node.nunique().max() > 1
    rows = []
    for cfg in dict.fromkeys(others.config):
        row = [cfg]
        for c in cells:
            at = others[(others.config == cfg) & (others.cell == c)]
            row.append("; ".join((f"{r.node}: " if multi else "") + _verdict_cell(r, i in best)
                                 for i, r in at.iterrows()) or "–")
        rows.append(row)
    top = "".join(f"{n[0].upper()}{n[1:]}. " for n in top_notes if n)
    return Section("Summary", ["configuration", *heads], rows,
                   top + f"Speedup over the same node's '{baseline}' (output tok/s; the ratio of geometric means over "
                   "runs, the centre of its interval), its 95 % interval with repeats (or the run count), and the "
                   f"verdict: {(noise or NoiseBand()).describe()}; 'best' = the highest measurably faster one. "
                   "The bullets below are caveats only." + (f" {repeats_note}" if repeats_note else ""),
                   anchor="summary")


def cells_section(cells: list[CellState], command: str | None) -> Section:
    bad = [c for c in cells if not c.merged]
    note = (f"Complete: all {len(cells)} planned (configuration, concurrency, node) cells are merged."
            if not bad else
            f"INCOMPLETE: {len(bad)} of {len(cells)} planned cells are not merged"
            + (f"; to measure them again: `{command}`" if command else "") + ".")
    cols = CELL_COLS[:2] + [("cell", "cell", -1, "")] + CELL_COLS[2:] \
        if any(c.cell != f"conc{c.concurrency}" for c in cells) else CELL_COLS
    df = pd.DataFrame([{"config": c.config, "concurrency": c.concurrency, "cell": c.cell, "node": c.node,
                        "state": c.state if c.merged else c.state.upper(),
                        "runs": f"{c.runs}/{c.expected}", "why": c.why} for c in cells],
                      columns=[col for col, *_ in cols])
    return _section("Planned cells", df, cols, note)


def build_model(campaign: str, tables: Tables, gate: GateResult, conclusions: list[str], *,
                baseline: str, simulated: bool, forced: bool, warnings: list[str] | None = None,
                quarantined: list[str] | None = None, cells: list[CellState] | None = None,
                command: str | None = None) -> ReportModel:
    bad = [c for c in cells or [] if not c.merged]
    # (applies, the stamp atop every output or None, the tag in the HTML title), in the order shown
    marks = [(simulated, SIMULATED_STAMP, "SIMULATED"),
             (forced and not gate.nodes_equivalent, NOT_EQUIVALENT_STAMP, "NODES NOT EQUIVALENT"),
             (gate.passed and "UNVERIFIED" in gate.verdict, None, "UNVERIFIED"),
             (forced and gate.mixed_plans, MIXED_PLANS_STAMP, "MIXED PLANS"),
             (forced and gate.mixed_provenance, MIXED_PROVENANCE_STAMP, "MIXED PROVENANCE"),
             (bool(bad), INCOMPLETE_STAMP.format(n=len(bad), total=len(cells or [])), "INCOMPLETE")]
    stamps = [stamp for on, stamp, _ in marks if on and stamp]
    tags = [tag for on, _, tag in marks if on]
    secs = []
    for cell in cell_order(tables.runs):
        rows = tables.runs[tables.runs.cell == cell]
        plain = cell == f"conc{rows.concurrency.iloc[0]}"
        secs.append(_section(f"Results {cell_title(rows)}", _flag_verdicts(rows),
                             RUN_COLS, f"Means over runs. Speedup = the geometric mean of output tok/s over runs / the "
                                       f"same node's '{baseline}' one at this concurrency (with one run each: "
                                       f"the plain ratio)"
                                       f"{'' if plain else ' in this bench cell'}. CI low/high and "
                                       f"'vs baseline': {tables.noise.describe() if tables.noise else ''}."
                                       + (f" {tables.repeats_note}" if tables.repeats_note else "")
                                       + (f" {tables.rates[cell]}" if cell in tables.rates else "")))
    secs += [_section(title, df, cols, note) for title, df, cols, note in latency_sections(tables.latency)]
    if not tables.spec.empty:
        swept = int("cell" in tables.spec and bool((tables.spec.cell != "conc" + tables.spec.concurrency.astype(str)).any()))
        secs.append(_section("Speculative decoding", tables.spec, SPEC_COLS + [("cell", "cell", -1, "")] * swept,
                             "From the spec_decode_* keys (server counters differenced over the run). "
                             "'–' = the file has no such keys: nothing was drafted."))
    if tables.categories is not None and "acceptance_length" in tables.categories:
        secs.append(_section("Per Spec-Bench category", _flag_verdicts(tables.categories), CATCELL_COLS,
                             "One bench cell per category (`--spec-bench-category`: the loader filters by "
                             "category, then its seed-0 shuffle picks the first num_prompts), so acceptance, "
                             "drafts per step and speedup come from that category's own server counters and "
                             "output tok/s; speedup against the same node's baseline in the same cell. "
                             "Drafts / step = drafts / (output tokens - accepted tokens)."))
        secs[-1].images = [f"{CATEGORY_IMAGE}-{i + 1}.svg" for i, _ in
                           enumerate(heatmap_grid(tables.categories, baseline))]
    elif tables.categories is not None:
        secs.append(_section("Per Spec-Bench category", tables.categories, CAT_COLS,
                             "TPOT per request, averaged per category; speedup against the same node's baseline."))
    if cells:
        secs.append(cells_section(cells, command))
    secs.append(_section("Node equivalence (baseline on every node)", gate.table, GATE_COLS,
                         "diff = (B - A) / A; CI low/high = the interval of B/A - 1 with repeats on both "
                         "nodes ('–' = single run). " + gate.rule.describe() + "."
                         + (f" Packing: {gate.packing}." if gate.packing else "")))
    if not tables.kv.empty:
        secs.append(_section("KV cache (server logs)", tables.kv, KV_COLS,
                             "Worst-case KV demand = max concurrency run x tokens per request / KV tokens."))
    if tables.bandwidth is not None:
        bw = tables.bandwidth
        flagged = "acceptance_flag" in bw and bw.acceptance_flag.isin(ACCEPTANCE_FLAGS).any()
        conflict = "datasheet_gbps" in bw
        per_node = "; ".join(f"{n} {b.gbps:g} GB/s ({b.source})" for n, b in sorted(tables.bandwidths.items()))
        secs.append(_section("Memory-bandwidth bound", bw, BW_COLS + (BW_GIVEN_COLS if conflict else [])
                             + ([BW_FLAG_COL] if flagged else []),
                             "Lowest TPOT if each decode step reads all weights once: "
                             + (f"{fmt(tables.min_tpot_ms)} ms" if tables.min_tpot_ms is not None and not conflict
                                else f"per node, in the table (bandwidth: {per_node})")
                             + ". bound / TPOT > 1 means more than one token "
                             "per weight read (speculative decoding)."
                             + (" WARNING: a given bandwidth contradicts its GPU's datasheet: both bounds are shown "
                                "(see the warnings)." if conflict else "")
                             + (" A flagged row's figure is not one of speculative decoding (see its flag)."
                                if flagged else "")))
    secs += [_section(title, df, cols, note) for title, df, cols, note in
             provenance_sections(tables.provenance, tables.provenance_results)]
    verdict = gate_verdict(gate, cells)
    return ReportModel(campaign=campaign, baseline=baseline, stamps=stamps, tags=tags, gate=gate,
                       conclusions=conclusions, sections=secs, notes=list(tables.notes),
                       warnings=list(warnings or []), quarantined=list(quarantined or []),
                       gate_verdict=verdict, answer=answer(tables.runs, baseline, verdict) if not tables.runs.empty else [],
                       summary=summary_section(_flag_verdicts(tables.runs), baseline, tables.repeats_note,
                                               tables.noise, [tables.setup_note, tables.waves_note])
                       if not tables.runs.empty else None)


def md_cell(s: str) -> str:
    """A Markdown table cell: a pipe escaped, a newline folded."""
    return s.replace("|", "\\|").replace("\n", " ")


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but tab and newline: ESC starts a terminal's codes


_HTML_OPEN = re.compile(r"<(?=[A-Za-z/!?])")


def shown(value: Any) -> Any:
    """A value as the report shows it: its control characters (a worker's terminal escape codes) as
    visible escapes (`\\x1b[31m`). Every `{{ }}` of both templates goes through here (Jinja's
    finalize): worker text enters the report in many fields, and leaves it only here."""
    if not isinstance(value, str) or isinstance(value, markupsafe.Markup):  # Markup: our own SVG
        return value
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), value)


def shown_md(value: Any) -> Any:
    """`shown`, and a `<` that could open HTML (a tag, comment, declaration or autolink: `<` before a
    letter, `/`, `!` or `?`) as `&lt;`: report.md is rendered as Markdown, which passes HTML through (a
    worker's `<script>` or `<img>` reads as text; report.html is autoescaped by Jinja). A `<` that
    cannot open HTML (`TPOT <= 50 ms`) stays as written, readable in the plain file."""
    value = shown(value)
    return _HTML_OPEN.sub("&lt;", value) if isinstance(value, str) else value


def page_environments(folder: Path) -> tuple[jinja2.Environment, jinja2.Environment]:
    """The Jinja environments of a page's HTML and Markdown templates in `folder` (the report's, `fab
    compare`'s): HTML autoescaped, every value through `shown` (Markdown: `shown_md`), `mdcell` for a
    table cell."""
    env = environment(folder, autoescape=jinja2.select_autoescape(["html", "html.j2"]),
                      keep_trailing_newline=False).overlay(finalize=shown)
    env.filters["mdcell"] = md_cell
    return env, env.overlay(autoescape=False, finalize=shown_md)


def write_report(out_dir: Path, model: ReportModel, tables: Tables) -> dict[str, Path]:
    out_dir = Path(out_dir)
    env, md_env = page_environments(TEMPLATE_DIR)
    paths = {"md": out_dir / "report.md", "html": out_dir / "report.html",
             "csv": out_dir / "merged.csv", "json": out_dir / "merged.json"}
    # written as a set (bastion_io.AtomicFiles): a full disk half-way leaves the earlier report whole
    with AtomicFiles() as files:
        files.tmp(paths["md"]).write_text(md_env.get_template("report.md.j2").render(m=model), encoding="utf-8")
        simulated = "SIMULATED" in model.tags
        for i, (_, svg) in enumerate(category_plots(tables.categories, model.baseline, simulated)):
            paths[f"heatmap{i + 1}"] = out_dir / f"{CATEGORY_IMAGE}-{i + 1}.svg"  # report.md links them
            files.tmp(paths[f"heatmap{i + 1}"]).write_text(svg, encoding="utf-8")
        for name, svg in ((n, f) for sec in model.sections for n, f in sec.figures.items()):
            paths[name] = out_dir / name
            files.tmp(paths[name]).write_text(svg, encoding="utf-8")
        plots = all_plots(tables.runs, tables.spec, model.baseline, simulated=simulated,
                          band=tables.noise.band if tables.noise else None, categories=tables.categories)
        files.tmp(paths["html"]).write_text(env.get_template("report.html.j2").render(m=model, plots=plots),
                                            encoding="utf-8")
        merged = tables.runs.copy()
        merged.insert(0, "stamp", " | ".join(model.stamps))
        merged.insert(1, "campaign", model.campaign)
        merged.insert(2, "schema_version", MERGED_SCHEMA_VERSION)  # docs/schemas/merged.schema.json
        merged.to_csv(files.tmp(paths["csv"]), index=False)
        merged.to_json(files.tmp(paths["json"]), orient="records", indent=1, double_precision=15)  # 10 by default
        files.commit()
    return paths


def print_report(model: ReportModel, console=None, gate_only: bool = False, warnings: list[str] | None = None) -> None:
    """The main tables on the terminal (rich); `warnings`: those to print (default: all the model's;
    the caller says its own notes itself)."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        import sys
        console = Console() if sys.stdout.isatty() else Console(width=160)
    for s in model.stamps:
        console.print(f"[bold white on red] {s} [/]")
    want = [s for s in model.sections if s.title.startswith("Node equivalence")] if gate_only else \
        [s for s in model.sections if s.title.startswith(("Results", "Speculative", "Node equivalence"))]
    cells = next((s for s in model.sections if s.title == "Planned cells"), None)
    for sec in want:
        t = Table(title=sec.title, title_justify="left")
        for h in sec.headers:
            t.add_column(h, justify="left" if h in ("config", "node", "metric", "node A", "node B") else "right")
        for row in sec.rows:
            style = "bold red" if "FAIL" in row else None
            t.add_row(*row, style=style)
        console.print(t)
    style = "green" if model.gate_verdict == "PASSED" else "yellow" if model.gate.passed else "bold red"
    console.print(f"Node equivalence [{style}]{model.gate_verdict}[/]: {model.gate.rule.describe()}",
                  markup=True, highlight=False)
    for c in model.gate.checks:
        console.print(f"  {c.node_a} vs {c.node_b} @ {c.where}: {c.reason}", markup=False)
    for t in model.gate_telemetry:
        console.print(f"  {t}", style="yellow", markup=False)
    for p in model.gate.problems:
        console.print(f"  problem: {p}", markup=False)
    if not gate_only:
        for c in model.conclusions:
            console.print("• " + c.replace("**", ""), markup=False)
        if model.answer:  # the answer last on the terminal, where the eye lands (first in report.md/html)
            console.print("[bold]Answer[/]")
            for a in model.answer:
                console.print("  " + a.replace("**", ""), markup=False)
    for m in model.quarantined + [f"warning: {w}" for w in (model.warnings if warnings is None else warnings)]:
        console.print(m, style="yellow", markup=False)
    if cells is not None:
        _print_cell_rows(cells, console)


def _print_cell_rows(sec: Section, console) -> None:
    """The not-merged cells, one line each, and the completeness verdict (the whole table is in the report)."""
    for row in sec.rows:
        if row[3] != "merged":
            console.print(f"{row[3]}: {row[0]} @ concurrency {row[1]} on {row[2]} ({row[4]} runs): {row[5]}",
                          style="bold red", markup=False)
    console.print(sec.note.replace("`", ""), style="green" if sec.note.startswith("Complete") else "bold red",
                  markup=False)


def print_cells(cells: list[CellState], command: str | None, console) -> None:
    """The cell states alone (when nothing could be merged)."""
    if cells:
        _print_cell_rows(cells_section(cells, command), console)
