"""`fab compare`: two collected campaigns, a verdict per bench cell (docs/compare.md); touches no host."""
from __future__ import annotations

from pathlib import Path

from invoke import task
from invoke.exceptions import Exit

from specfleet.errors import UserError
from specfleet.exits import EXIT_ASSERTION, EXIT_REGRESSION, EXIT_UNDECIDABLE

FAIL_ON = ("regression", "never")


@task(help={"baseline": "the earlier campaign's results folder (results/<campaign>, as fab collect wrote it)",
            "candidate": "the campaign to judge against it",
            "out": "where compare.md/.html/.json/.svg go (default: <candidate's parent>/compare-<b>-vs-<c>)",
            "metric": "narrow the per-cell judgement to these gate metrics, comma-separated (default: output "
                      "tok/s, TTFT and the per-token metric, each a regression on its own; open-loop cells "
                      "skip throughput)",
            "tolerance_pct": "the band a difference must clear (default: the candidate plan's equivalence.tolerance_pct)",
            "fail_on": f"regression: exit {EXIT_REGRESSION} when a cell, a speedup or (both plans with an SLO) "
                       "a cell's goodput or SLO attainment regressed (Holm, family-wise 5 %), and exit "
                       f"{EXIT_UNDECIDABLE} when a figure has one run on a side (undecidable) (default never)",
            "single_run_threshold": "judge single-run figures on the plain threshold (no test), accepting the "
                                    "false-alarm rate the output states",
            "force": "compare campaigns of different models or datasets, or with nodes not equivalent; "
                     "every output says so"})
def compare(c, baseline, candidate, out=None, metric=None, tolerance_pct=None, fail_on="never", force=False,
            single_run_threshold=False):
    """Compare two collected campaigns: per cell ratio with its interval and a verdict; provenance first."""
    if fail_on not in FAIL_ON:
        raise UserError(f"--fail-on {fail_on!r}: one of {', '.join(FAIL_ON)}")
    from specfleet.console import MaskedConsole

    from specfleet.report.compare.comparison import compare_dirs  # heavy: pandas, matplotlib
    from specfleet.report.compare.compare_render import stamps, summary, write_outputs

    b, k = Path(baseline), Path(candidate)
    dest = Path(out) if out else k.resolve().parent / f"compare-{b.resolve().name}-vs-{k.resolve().name}"
    if dest.exists() and not dest.is_dir():
        raise UserError(f"--out {dest}: an existing file, not a folder (compare.md, .html, .json go in a folder)")
    cmp = compare_dirs(baseline, candidate, metric=metric, force=force, single_run_threshold=single_run_threshold,
                       tolerance_pct=float(tolerance_pct) if tolerance_pct else None)
    try:
        paths = write_outputs(cmp, dest)
    except OSError as e:
        raise UserError(f"--out {dest}: cannot write the comparison there ({e.strerror or e})") from None
    console = MaskedConsole(highlight=False)
    for s in stamps(cmp):
        console.print(f"[bold white on red] {s} [/]")
    for what, a, bb in cmp.provenance:
        console.print(f"provenance: {what}: {a} -> {bb}", markup=False)
    for f, a, bb in cmp.plan_compared + cmp.plan_other:
        console.print(f"plan: {f}: {a} -> {bb}", markup=False)
    for line in summary(cmp):
        console.print(line, markup=False, style="bold red" if line.startswith(("REGRESSION", "UNDECIDABLE",
                                                                               "assertion FAILED",
                                                                               "assertion NOT")) else None)
    console.print(f"[bold green]comparison:[/] {paths['html']}")
    code = 0
    if fail_on == "regression" and (cmp.regressions or cmp.speedup_regressions or cmp.goodput_regressions):
        code |= EXIT_REGRESSION
    if fail_on == "regression" and cmp.undecidable:
        code |= EXIT_UNDECIDABLE
    if cmp.assertions_failed:
        code |= EXIT_ASSERTION
    if code:
        raise Exit(code=code)
