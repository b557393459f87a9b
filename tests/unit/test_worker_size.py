"""The worker's size budget (docs/dev/worker.md, "Its size"): the program that travels to every
worker does not grow unnoticed. A change that needs more lines raises WORKER_LINES in the same
commit and says in its message which behaviour the lines buy."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKER_LINES = 3_487  # all lines, as scripts/package-lines counts them (2,300 on 2026-12-03; main 2,304 on 2026-12-06,
# then 2,323 with issue 37's request count of the running bench and the phase's "repeat K of R" wording, then
# 2,482 with issue 38's drafter check, release refusal, TTFT + ITL latency and custom dataset prompts, then
# 2,552 with issue 39's power stream: nvidia-smi --loop-ms on a pty, on the monotonic clock, then 2,692 with
# issue 40's run record: worker/record.py and Lane.run_record, what each run was, written beside its result,
# then 2,917 with issue 38's per-request acceptance: worker/acceptance.py, the untimed pass after a speculative
# server's timed runs that keeps each response's metrics.speculative_decoding, and Lane.acceptance_pass, then
# 2,998 with issue 38's prompt template per run (fitcheck.applied_template, the lane's check of the plan against the
# release it observed, the fit check's count, the run
# record's chat_template) and speed_bench (its flags in runspec, messages[0].content, its kept folder),
# then 3,201 with issue 40's Slurm job step, slurm_step.py: it travelled already, as a second program beside
# runner.pyz (slurm/node_step.py, 204 lines); now it is a part of the one zipapp, not a line more on a node), then
# 3,487 with issue 40's typed run spec: RunSpec, Item, Fit, Crossover, Gpu and the state records ItemState and
# RunState as dataclasses, built once from run.json by a field checker that names the field in one line)


def worker_lines(folder: Path) -> int:
    out = subprocess.run([sys.executable, str(ROOT / "scripts/package-lines"), str(folder)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.splitlines()[-1].split()[1].replace(",", ""))


def test_the_worker_stays_within_its_budget():
    lines = worker_lines(ROOT / "specfleet" / "worker")
    assert lines <= WORKER_LINES, (f"specfleet/worker has {lines} lines, over its budget of {WORKER_LINES}: "
                                   "cut, or raise WORKER_LINES and say which behaviour the lines buy")


def test_the_count_sees_a_file_that_grows(tmp_path):
    # the budget's count is the one scripts/package-lines gives: a line added is a line counted
    (tmp_path / "a.py").write_text("x = 1\n" * 10)
    before = worker_lines(tmp_path)
    (tmp_path / "b.py").write_text('"""Doc."""\n\n# why\ny = 2\n')
    assert (before, worker_lines(tmp_path)) == (10, 14)
