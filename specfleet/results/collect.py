"""The local, SSH-free half of `fab collect`: validate, gate, merge, report.

    outcome = report_campaign("results/<campaign>")
    if not outcome.ok: sys.exit(outcome.exit_code)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .campaign import Campaign, Quarantined, scan_campaign
from .conclusions import conclusions
from .gate import EquivalenceRule, GateResult, check_equivalence
from .measures import NoiseBand
from .merge import Tables, build_tables
from .render import ReportModel, build_model, print_report, write_report

DEFAULT_RULE = EquivalenceRule(metric="output_throughput", concurrency=16, tolerance_pct=3.0)
MERGED_FILES = ("report.md", "report.html", "merged.csv", "merged.json")


@dataclass
class CollectOutcome:
    campaign_dir: Path
    gate: GateResult
    merged: bool
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

    @property
    def ok(self) -> bool:
        """True when a report was written (gate passed, or forced)."""
        return self.merged

    @property
    def exit_code(self) -> int:
        """0 merged; 1 gate failed and not forced; 2 nothing valid to merge."""
        if self.merged:
            return 0
        return 2 if self.error else 1


def _remove_stale(campaign_dir: Path) -> None:
    """A refused merge must not leave an older report looking current."""
    for name in MERGED_FILES:
        p = campaign_dir / name
        if p.is_file():
            p.unlink()


def report_campaign(campaign_dir: Path | str, baseline: str = "vanilla",
                    rule: EquivalenceRule | None = None, force: bool = False,
                    gpu_bandwidth_gbps: float | None = None, weights_gib: float | None = None,
                    console=None, quiet: bool = False) -> CollectOutcome:
    """Validate (quarantine bad files), gate on node equivalence, merge, write
    report.md / report.html / merged.csv / merged.json into `campaign_dir`, and
    print the main tables (rich) unless quiet.

    When the gate fails and not `force`: prints the equivalence table, writes
    nothing merged (and removes a previous merged report), returns merged=False.
    With `force` the outputs are stamped "NODES NOT EQUIVALENT".
    """
    campaign_dir = Path(campaign_dir)
    rule = rule or DEFAULT_RULE
    camp: Campaign = scan_campaign(campaign_dir)
    gate = check_equivalence(camp, rule, baseline)
    out = CollectOutcome(campaign_dir=campaign_dir, gate=gate, merged=False, forced=False,
                         simulated=camp.simulated, quarantined=list(camp.quarantined),
                         pending=list(camp.pending), warnings=list(camp.warnings))
    qmsgs = [q.message() for q in camp.quarantined]
    if not camp.runs:
        out.error = f"{campaign_dir}: no valid, done result files to merge"
        _remove_stale(campaign_dir)
        if not quiet:
            from rich.console import Console
            c = console or Console()
            for m in qmsgs + out.warnings:
                c.print(m, style="yellow", markup=False)
            c.print(out.error, style="bold red", markup=False)
        return out
    tables = build_tables(camp, baseline, gpu_bandwidth_gbps, weights_gib, NoiseBand(rule.tolerance_pct))
    concl = conclusions(tables, baseline)
    forced = force and not gate.passed
    model = build_model(camp.name, tables, gate, concl, baseline=baseline, simulated=camp.simulated,
                        forced=forced, warnings=camp.warnings, quarantined=qmsgs)
    out.tables, out.model, out.conclusions, out.forced = tables, model, concl, forced
    if not gate.passed and not force:
        _remove_stale(campaign_dir)
        if not quiet:
            print_report(model, console, gate_only=True)
        return out
    out.paths = write_report(campaign_dir, model, tables)
    out.merged = True
    if not quiet:
        print_report(model, console)
    return out
