"""The bastion's own faults (issue 28): a full disk and a read-only results folder are each one line and
their own exit code (74, 73), never a crash (70); the report written before is intact, and no temp
file is left. On a small tmpfs this test mounts and removes itself (never the real disk)."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from campaign_builder import write_campaign
from test_fab_report import CAMPAIGN, fab_report, out

from specfleet.exits import EXIT_DISK_FULL, EXIT_NOT_WRITABLE
from specfleet import bastion_io


@pytest.fixture
def small_fs(tmp_path):
    """A 3 MiB tmpfs at tmp_path/results (root only; skipped elsewhere)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "results"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0755", "sf-test-results", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def snapshot(camp: Path) -> dict[str, bytes]:
    return {str(p.relative_to(camp)): p.read_bytes() for p in camp.rglob("*") if p.is_file()}


def fill(mnt: Path, leave: int) -> Path:
    """A filler file that leaves about `leave` bytes free on `mnt`."""
    f = mnt / "filler"
    f.unlink(missing_ok=True)
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    with open(f, "wb") as fh:
        try:
            fh.write(b"\0" * max(free - leave, 0))
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return f


def test_a_full_disk_is_one_line_exit_74_and_the_earlier_report_stays(small_fs, tmp_path):
    camp = write_campaign(small_fs / CAMPAIGN, done=False, logs=False)
    first = fab_report(tmp_path)
    assert first.returncode == 0, out(first)
    before = snapshot(camp)
    # room for the write check, not for a report: the disk fills while the report is written
    fill(small_fs, 64 * 1024)
    (camp / "w1" / "touch").write_text("x")  # (a new file, so nothing is cached)
    full = fab_report(tmp_path)
    assert full.returncode == EXIT_DISK_FULL, out(full)
    errors = [ln for ln in (full.stdout + full.stderr).splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "the bastion's disk is full" in errors[0], out(full)
    assert "Traceback" not in full.stdout + full.stderr and "crashed" not in full.stderr
    assert "measure" not in errors[0] or "nothing needs measuring again" in errors[0]
    after = snapshot(camp)
    del after["w1/touch"]
    assert after == before, "a file of the earlier report changed or a temp file stayed"
    # no room at all: refused by the write check before anything is read
    fill(small_fs, 0)
    none = fab_report(tmp_path)
    assert none.returncode == EXIT_DISK_FULL and "disk is full" in none.stderr, out(none)
    assert snapshot(camp) == before | {"w1/touch": b"x"}  # (recovery after freeing: the e2e test)


def test_a_read_only_results_folder_is_one_line_exit_73(small_fs, tmp_path):
    camp = write_campaign(small_fs / CAMPAIGN, done=False, logs=False)
    assert fab_report(tmp_path).returncode == 0
    before = snapshot(camp)
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    try:
        ro = fab_report(tmp_path)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=True)
    assert ro.returncode == EXIT_NOT_WRITABLE, out(ro)
    errors = [ln for ln in (ro.stdout + ro.stderr).splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: ") and "Read-only file system" in errors[0], errors
    assert snapshot(camp) == before


def test_rsync_and_oserror_messages_are_classified(tmp_path):
    full = bastion_io.of_rsync('rsync: [receiver] write failed on "x": No space left on device (28)\n', tmp_path)
    assert full is not None and full.code == EXIT_DISK_FULL
    assert bastion_io.of_rsync("rsync: connection unexpectedly closed", tmp_path) is None
    ro = bastion_io.of_oserror(OSError(errno.EROFS, "Read-only file system", str(tmp_path / "f")), tmp_path)
    assert ro is not None and ro.code == EXIT_NOT_WRITABLE and "\n" not in str(ro)
    assert bastion_io.of_oserror(OSError(errno.EEXIST, "File exists"), tmp_path) is None


def test_atomic_files_leave_nothing_when_a_write_fails(tmp_path):
    (tmp_path / "a").write_text("old a")
    with pytest.raises(RuntimeError):
        with bastion_io.AtomicFiles() as files:
            files.tmp(tmp_path / "a").write_text("new a")
            files.tmp(tmp_path / "b").write_text("new b")
            raise RuntimeError("disk full half-way")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"] and (tmp_path / "a").read_text() == "old a"


def test_collect_during_a_running_bench_does_not_advise_measuring_again(tmp_path):
    """A node whose runner is alive (collect saw it): its missing cells wait for the bench, the
    advice is to collect later, not `fab bench` (issue 28)."""
    import yaml
    from campaign_builder import REPORT
    from test_fab_report import PLAN
    from specfleet.plan import parse_plan
    from specfleet.report.build import report_plan
    camp = write_campaign(tmp_path / "results" / CAMPAIGN, data={k: v for k, v in REPORT.items()
                                                                 if k[1] != "ngram"}, done=False, logs=False)
    plan = parse_plan(PLAN)
    queues = {"w1": ["vanilla", "ngram", "ngram_improved"], "w2": ["vanilla", "eagle3"]}
    outcome = report_plan(plan, "plan.yml", tmp_path / "results", split_queues=queues, quiet=True,
                          running={"w1": "runner pid 4242"})
    assert outcome.incomplete_message and "to measure them again" not in outcome.incomplete_message
    note = [w for w in outcome.warnings if w.startswith("the bench is still running on w1 (runner pid 4242)")]
    assert note and "nothing needs measuring again" in note[0] and "fab collect --plan plan.yml" in note[0]
    md = (camp / "report.md").read_text()
    assert "INCOMPLETE" in md and "to measure them again" not in md and "the bench is still running on w1" in md
    # without a live runner the advice is to measure again
    again = report_plan(plan, "plan.yml", tmp_path / "results", split_queues=queues, quiet=True)
    assert "to measure them again: fab bench --plan plan.yml" in again.incomplete_message


def test_two_writers_at_once_each_have_their_own_temp_files(tmp_path):
    """Two `fab collect` (or `fab report`) at once write the same report files: each has temp files
    of its own (was one shared name: the second's rename crashed on a file the first had moved)."""
    import stat
    first, second = bastion_io.AtomicFiles(), bastion_io.AtomicFiles()
    with first, second:
        first.tmp(tmp_path / "report.md").write_text("first")
        second.tmp(tmp_path / "report.md").write_text("second")
        first.commit()
        second.commit()
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]
    assert (tmp_path / "report.md").read_text() == "second"
    mode = stat.S_IMODE((tmp_path / "report.md").stat().st_mode)
    assert mode == 0o666 & ~bastion_io._UMASK  # as a plain open() makes it, not mkstemp's 0600
