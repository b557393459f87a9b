"""The local, SSH-free half of `fab collect`, and all of `fab report`: validate, gate, merge, report.

    outcome = report_campaign("results/<campaign>", planned=planned_from(plan, "plan.yml", dir))
    sys.exit(outcome.exit_code)   # 0 complete; 16 some planned cell not merged; 8 nothing merged
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..exits import EXIT_ASSERTION, EXIT_INCOMPLETE, EXIT_NOT_MERGED
from ..plan.assertions import NOT_CHECKED, AssertionResult, check
from ..plan.releases import not_checked, unchecked_releases
from .scan.folder import CollectedFolder, Expect, Quarantined, scan_folder
from ..bastion_io import atomic_write_text
from .scan.cells import PLANNED_FILE, CellState, Planned, cell_states, planned_from
from .tables.conclusions import conclusions
from .gates.gate import DEFAULT_BASELINE, EquivalenceRule, GateResult, check_equivalence
from .render.goodput import SLO_HEADERS, add_goodput, slo_lines, slo_rows
from .gates.gpu_gate import split_off_gpu_copies
from .tables.measures import NoiseBand
from .tables.merge import Tables, build_tables
from .render.document import ReportModel, Section, build_model, fmt, print_cells, print_report, write_report
from .render.acceptance_report import add_acceptance_section
from .render.drafter_report import add_drafter_section
from .export.llmd import export_cells, remove_stale
from .scan.plan_snapshot import plan_drift, write_snapshot
from .scan.provenance import given_bandwidths, plan_hashes, simulated_signals
from .render.plots import namespace_ids
from .render.telemetry_report import (TELEMETRY_HEADERS, TIMELINE_IMAGE, node_differences, telemetry_rows, telemetry_table,
                               timeline_svg)

MERGED_FILES = ("report.md", "report.html", "merged.csv", "merged.json")


@dataclass
class ReportOutcome:
    campaign_dir: Path
    gate: GateResult
    merged: bool          # a report was written (the gate passed, or forced)
    forced: bool
    simulated: bool
    paths: dict[str, Path] = field(default_factory=dict)
    quarantined: list[Quarantined] = field(default_factory=list)
    pending: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    conclusions: list[str] = field(default_factory=list)
    tables: Tables | None = None
    model: ReportModel | None = None
    error: str | None = None
    cells: list[CellState] = field(default_factory=list)
    command: str | None = None   # what measures the cells that are not merged again
    assertions: list = field(default_factory=list)  # the plan's assertions (bench/assertions.py), checked
    folder: CollectedFolder | None = None   # what was scanned (the llm-d export reads its runs)
    measured_plan: str | None = None   # the plan hash(es) the results carry where the plan's is not one
    measurement_changed: bool = False  # ...and the plan now measures something else (or unknown)

    @property
    def not_merged_cells(self) -> list[CellState]:
        return [c for c in self.cells if not c.merged]

    @property
    def complete(self) -> bool:
        """Every planned cell has its valid runs (without a plan: no file was refused)."""
        return not self.not_merged_cells and not (not self.cells and self.quarantined)

    @property
    def not_merged_message(self) -> str | None:
        if self.merged:
            return None
        if self.error:
            return self.error
        if self.gate.verdict.startswith("INCONCLUSIVE"):
            return (f"node equivalence {self.gate.verdict}: nothing merged (add repeats of the baseline: "
                    "docs/report.md, \"Adding repeats\"; --force merges and stamps the outputs)")
        return ("the nodes are not equivalent: nothing merged "
                "(see the table above; --force merges and stamps the outputs)")

    @property
    def incomplete_message(self) -> str | None:
        bad = self.not_merged_cells
        if not bad:
            return None
        names = ", ".join(c.label() for c in bad[:4]) + (", ..." if len(bad) > 4 else "")
        again = f"; to measure them again: {self.command}" if self.command else ""
        return f"report incomplete: {len(bad)} of {len(self.cells)} planned cells not merged ({names}){again}"

    @property
    def exit_code(self) -> int:
        """Bit flags as the fleet's: 8 nothing merged (gate failed and not forced, or nothing valid),
        16 some planned cell is missing or quarantined (24: both); 0 a complete report."""
        code = 0 if self.merged else EXIT_NOT_MERGED
        if not self.complete:
            code |= EXIT_INCOMPLETE
        if any(not a.ok for a in self.assertions):
            code |= EXIT_ASSERTION
        return code


def _remove_stale(campaign_dir: Path) -> None:
    """A refused merge must not leave an older report looking current."""
    for name in MERGED_FILES:
        p = campaign_dir / name
        if p.is_file():
            p.unlink()


def report_campaign(campaign_dir: Path | str, baseline: str = DEFAULT_BASELINE,
                    rule: EquivalenceRule | None = None, force: bool = False,
                    gpu_bandwidth_gbps: float | None = None, weights_gib: float | None = None,
                    console=None, quiet: bool = False, planned: Planned | None = None,
                    expect: Expect | None = None, quarantine: bool = True,
                    notes: list[str] | None = None, vllm_pin: str | None = None, slo=None) -> ReportOutcome:
    """Validate (quarantine bad files), gate on node equivalence, merge, write MERGED_FILES into
    `campaign_dir` and print the main tables unless quiet. A failed gate without `force` writes nothing
    and removes a previous merged report: an older report must not look current.
    `planned` (the plan's cells and who was to measure them) makes the report list every cell's
    state; `expect` says when a run counts (requests completed); `quarantine=False` moves nothing.
    """
    campaign_dir = Path(campaign_dir)
    rule = rule or EquivalenceRule()
    camp: CollectedFolder = scan_folder(campaign_dir, quarantine=quarantine, expect=expect)
    gate = check_equivalence(camp, rule, baseline, vllm_pin)
    out = ReportOutcome(campaign_dir=campaign_dir, gate=gate, merged=False, forced=False,
                         simulated=bool(simulated_signals(camp)), quarantined=list(camp.quarantined),
                         pending=list(camp.pending), warnings=list(notes or []) + list(camp.warnings))
    out.warnings += unchecked_releases(str(r.result.extra.get("vllm_version") or "") for r in camp.runs
                                       if not r.result.simulated)
    out.cells = cell_states(camp, planned) if planned else []
    out.folder = camp
    qmsgs = [q.message() for q in camp.quarantined]
    qmsgs += [f"in quarantine: {a.path}: {a.reason}" for a in camp.set_aside]
    # while a runner is still measuring, fab bench is not the advice: the note says to collect later
    command = out.command = planned.command() if planned and not planned.running else None
    if planned and planned.running_note():
        out.warnings.append(planned.running_note())
    if planned and planned.problem:
        out.warnings.append(planned.problem)
    out.warnings += planned.left_out_notes() if planned else []
    hashes = plan_hashes(camp)
    if planned and (drift := plan_drift(campaign_dir, hashes, planned.plan_hash, planned.fields, planned.plan_path)):
        out.warnings.append(drift[0])
        out.measured_plan, out.measurement_changed = ", ".join(sorted(hashes)), drift[1]
    own = [w for w in out.warnings if w not in (notes or [])]  # on the terminal: the caller says its notes itself
    if not camp.runs:
        out.error = f"{campaign_dir}: no valid, done result files to merge"
        _remove_stale(campaign_dir)
        if not quiet:
            from rich.console import Console
            c = console or Console()
            for m in qmsgs + own:
                c.print(m, style="yellow", markup=False)
            print_cells(out.cells, command, c)
            c.print(out.error, style="bold red", markup=False)
        return out
    # the baseline's runs on a node's other GPUs (equivalence.every_gpu) went to the gate, not the tables
    # one figure given for all (--gpu-bandwidth-gbps), else each node's inventory figure as collect saved it
    # (provenance.json), else the datasheet of the GPU each node named
    given = gpu_bandwidth_gbps or given_bandwidths(camp) or None
    tables = build_tables(split_off_gpu_copies(camp, baseline), baseline, given, weights_gib,
                          NoiseBand(rule.tolerance_pct))
    out.warnings += tables.bandwidth_warnings
    own += tables.bandwidth_warnings
    tables.runs = add_goodput(camp, tables.runs, baseline, slo)  # goodput under the plan's SLO (docs/slo.md)
    concl = conclusions(tables, baseline)
    forced = force and not gate.passed
    model = build_model(camp.name, tables, gate, concl, baseline=baseline, simulated=out.simulated,
                        forced=forced, warnings=out.warnings, quarantined=qmsgs, cells=out.cells,
                        command=command)
    add_peer_sections(model, camp, tables, baseline, slo)
    add_drafter_section(model, camp)
    add_acceptance_section(model, camp, tables.runs, baseline)
    out.tables, out.model, out.conclusions, out.forced = tables, model, concl, forced
    if not gate.passed and not force:
        _remove_stale(campaign_dir)
        if not quiet:
            print_report(model, console, gate_only=True, warnings=own)
        return out
    out.paths = write_report(campaign_dir, model, tables)
    out.merged = True
    if not quiet:
        print_report(model, console, warnings=own)
    return out


def report_plan(plan, plan_path: str, results_root: Path | str, *, force: bool = False,
                gpu_bandwidth_gbps: float | None = None, split_queues: dict[str, list[str]] | None = None,
                host_notes: dict[str, str] | None = None, notes: list[str] | None = None,
                console=None, quiet: bool = False, running: dict[str, str] | None = None,
                queues_source: str | None = None) -> ReportOutcome:
    """`fab report` and the second half of `fab collect`: the report of `plan`'s campaign from the
    files in `<results_root>/<campaign>/`, every planned cell with its state. Moves nothing but
    the report files it writes (collect quarantines while fetching, see staging.py).

    `split_queues`, `host_notes` (collect only): the queues of the hosts it was asked for (where they
    came from: `queues_source`, cells.PLACED or cells.SPLIT) and why a host gave nothing; they are
    saved as planned.json so a later `fab report` knows them too.
    """
    campaign_dir = Path(results_root) / plan.campaign
    planned = planned_from(plan, plan_path, campaign_dir, split_queues, host_notes, running,
                           **({"queues_source": queues_source} if queues_source else {}))
    if split_queues is not None:
        campaign_dir.mkdir(parents=True, exist_ok=True)
        pf = campaign_dir / PLANNED_FILE
        if not pf.is_file() or pf.read_text(encoding="utf-8") != planned.to_json():
            atomic_write_text(pf, planned.to_json())
    eq = plan.equivalence
    rule = EquivalenceRule(metric=eq.metric, concurrency=eq.concurrency, tolerance_pct=eq.tolerance_pct)
    expect = Expect.of_plan(plan)
    out = report_campaign(campaign_dir, baseline=plan.baseline, rule=rule, force=force,
                          gpu_bandwidth_gbps=gpu_bandwidth_gbps, weights_gib=plan.model.weights_gib,
                          console=console, quiet=quiet, planned=planned, expect=expect,
                          quarantine=False, notes=[*(notes or []), *not_checked(plan)], vllm_pin=plan.vllm_version,
                          slo=plan.benchmark.slo)
    after_report(out, plan, console, quiet)
    return out


# what collect / report do after the report for the features peer tools have (issue 26)
def add_peer_sections(model, camp, tables, baseline: str, slo) -> None:
    """The report's "Goodput under the SLO" section (after the results) when the plan has an SLO;
    "Telemetry per run" with its timeline (inlined in report.html) when any run has a telemetry file
    (telemetry_report.py); and, when the gate failed, each node's telemetry beside the gate line."""
    tel, simulated = telemetry_table(camp), bool(simulated_signals(camp))
    if not model.gate.passed:
        model.gate_telemetry = node_differences(tel, baseline, model.gate.rule.concurrency)
    if tel is not None:
        svg = timeline_svg(camp, simulated)
        model.sections.append(Section(
            "Telemetry per run", TELEMETRY_HEADERS, telemetry_rows(tel, fmt),
            "Sampled on the worker during each vllm bench serve run (nvidia-smi --query-gpu for the server's "
            "GPUs, the server's /metrics; docs/telemetry.md). Mean power = the run's GPUs summed, averaged over "
            "the samples (client start-up and warm-ups included); J / output token = the GPUs' energy over the "
            "measured window only (first request's start to last request's end: the trapezoid of the distinct "
            "power readings, within 0.5 % of NVML's energy counter on an H100) / its output tokens; above idle: "
            "minus idle W x the window, idle W = median power before the first request; fewer than 10 distinct "
            "power readings in the window: 'not "
            "measurable' (the note says why); throttle = the clock-event reasons seen (SW/HW power cap, thermal, power brake); "
            "'not recorded' = the worker could not read it (no nvidia-smi, a field its driver lacks). "
            "The timeline: requests in flight, generated tokens/s and GPU power over each run at the highest "
            "concurrency with telemetry (up to 8 runs)."
            + (" SIMULATED: the testbed's GPU stand-in models power and clocks." if simulated else ""),
            anchor="telemetry-per-run", images=[TIMELINE_IMAGE] if svg else [],
            figures={TIMELINE_IMAGE: namespace_ids(svg, "timeline")} if svg else {}))
    if slo is None or "goodput_req_s" not in tables.runs:
        return
    lines = slo_lines(tables.runs, baseline, slo)
    sec = Section("Goodput under the SLO", SLO_HEADERS, slo_rows(tables.runs), " ".join(lines),
                  anchor="goodput-under-the-slo")
    at = next((i for i, s in enumerate(model.sections) if not s.title.startswith(("Results", "Latency"))),
              len(model.sections))
    model.sections.insert(at, sec)
    model.conclusions += lines[1:]


def after_report(out, plan, console=None, quiet: bool = False) -> None:
    """Writes plan.json beside the host folders (while the results carry the plan's hash); checks the
    plan's assertions into out.assertions (a failed or unchecked one adds EXIT_ASSERTION to the exit
    code) and prints them."""
    if out.campaign_dir.is_dir() and out.measured_plan is None:  # plan.json: the plan the results measured
        write_snapshot(out.campaign_dir, plan)
    _stale_timeline(out)
    if out.merged and out.tables is not None and out.folder is not None and not out.measurement_changed:
        # llm-d Benchmark Report v0.2, stamped with the plan hash the results carry
        if files := export_cells(out.campaign_dir, out.folder, out.tables, plan, out.model.gate_verdict,
                                 out.gate.rule.describe(), out.measured_plan or plan.plan_hash()):
            out.paths["llm-d"] = files[0].parent
    else:
        remove_stale(out.campaign_dir)
    if not plan.assertions:
        return
    if out.merged and out.tables is not None:
        out.assertions = check(plan.assertions, out.tables.runs.to_dict("records"))
    else:
        out.assertions = [AssertionResult(a, NOT_CHECKED, "nothing merged") for a in plan.assertions]
    if not quiet:
        from rich.console import Console
        c = console or Console()
        for a in out.assertions:
            c.print(a.line(), style="green" if a.ok else "bold red", markup=False)


def _stale_timeline(out) -> None:
    """No timeline beside a report that does not show one (write_report writes it with the report)."""
    if TIMELINE_IMAGE in out.paths:
        return
    svg_path = out.campaign_dir / TIMELINE_IMAGE
    if svg_path.is_file():
        svg_path.unlink()
