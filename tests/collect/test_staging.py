"""Collect's staging (specfleet.collect.staging): a fetched file replaces the local copy only when
it is valid; an invalid one is quarantined and the local copy, valid or not, stays. No SSH here:
tests/e2e/test_collect.py runs the same through rsync from a testbed worker."""
from __future__ import annotations

import json
from pathlib import Path

from specfleet.resultfile.check import Expect
from specfleet.collect.staging import accept, fresh_staging

from tests.report.campaign_builder import REPORT, result_json

EXPECT = Expect(num_prompts=16)


def good(values=REPORT[("w1", "vanilla", 1)], **extra) -> str:
    return json.dumps(result_json(values, conc=1, extra={"node": "w1", "config": "vanilla", **extra}))


def test_invalid_fetched_file_never_replaces_a_valid_local_one(tmp_path):
    camp = tmp_path / "c"
    (camp / "w1").mkdir(parents=True)
    (camp / "w1" / "vanilla_conc1.json").write_text(good())
    stage = fresh_staging(camp, "w1")
    (stage / "vanilla_conc1.json").write_text(good()[:300])      # the worker's copy, truncated
    (stage / "vanilla.done").write_text("{}")
    got = accept(camp, "w1", EXPECT)
    assert (camp / "w1" / "vanilla_conc1.json").read_text() == good()   # kept
    q = camp / "quarantine" / "w1" / "vanilla_conc1.json"
    assert q.read_text() == good()[:300]
    assert "invalid JSON" in (q.parent / "vanilla_conc1.json.reason.txt").read_text()
    [msg] = got.refused
    assert "w1:vanilla_conc1.json on the worker is invalid" in msg and "valid copy collected earlier is kept" in msg
    assert got.replaced == ["vanilla.done"] and not stage.exists()


def test_valid_fetched_file_replaces_an_invalid_local_one_and_twice_is_a_no_op(tmp_path):
    camp = tmp_path / "c"
    (camp / "w1").mkdir(parents=True)
    (camp / "w1" / "vanilla_conc1.json").write_text("{")
    for _ in range(2):
        stage = fresh_staging(camp, "w1")
        (stage / "vanilla_conc1.json").write_text(good())
        got = accept(camp, "w1", EXPECT)
        assert got.replaced == ["vanilla_conc1.json"] and not got.refused
        assert (camp / "w1" / "vanilla_conc1.json").read_text() == good()
    assert not (camp / "quarantine").exists()


def test_a_run_with_failed_requests_is_refused_with_its_cause(tmp_path):
    camp = tmp_path / "c"
    stage = fresh_staging(camp, "w1")
    errors = [""] * 5 + ["Server disconnected"] * 11
    (stage / "vanilla_conc1.json").write_text(good(completed=5, failed=11, errors=errors))
    got = accept(camp, "w1", EXPECT)
    [msg] = got.refused
    assert "11 of 16 requests failed" in msg and "Server disconnected" in msg and "no earlier copy" in msg
    assert not (camp / "w1" / "vanilla_conc1.json").exists()
    assert (camp / "quarantine" / "w1" / "vanilla_conc1.json").is_file()


def test_a_crashed_collects_staging_is_not_taken(tmp_path):
    camp = tmp_path / "c"
    stage = fresh_staging(camp, "w1")
    (stage / "vanilla_conc1.json").write_text(good()[:100])
    stage = fresh_staging(camp, "w1")  # the next collect starts from an empty staging folder
    assert not any(stage.iterdir())
    assert accept(camp, "w1", EXPECT).replaced == []


def test_two_collects_at_once_each_stage_their_own_and_a_dead_ones_leftovers_go(tmp_path):
    """Another `fab collect` (another process) starting on the same campaign while this one has files
    staged for w1: it emptied .staging/w1 under this one (files gone, its accept crashed). Each
    collect has its own folder; a folder whose collect is gone is removed by the next."""
    import subprocess
    import sys
    from specfleet.collect.staging import STAGING_DIR
    camp = tmp_path / "c"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = camp / STAGING_DIR / f"w1.{dead.pid}"
    leftover.mkdir(parents=True)
    (leftover / "vanilla_conc1.json").write_text(good()[:100])
    other_host = camp / STAGING_DIR / "w1.example.1"   # host w1.example's, not w1's
    other_host.mkdir()
    stage = fresh_staging(camp, "w1")
    assert not leftover.exists() and other_host.is_dir()
    (stage / "vanilla_conc1.json").write_text(good())
    (stage / "vanilla.done").write_text("{}")
    other = subprocess.run([sys.executable, "-c", "import sys; from specfleet.collect.staging import accept, "
                            "fresh_staging; s = fresh_staging(sys.argv[1], 'w1'); print(s)", str(camp)],
                           capture_output=True, text=True, timeout=120)
    assert other.returncode == 0, other.stderr
    assert Path(other.stdout.strip()) != stage and (stage / "vanilla_conc1.json").is_file()
    got = accept(camp, "w1", EXPECT)
    assert sorted(got.replaced) == ["vanilla.done", "vanilla_conc1.json"], got


def test_a_fetched_result_that_names_another_node_is_refused_and_the_local_copy_stays(tmp_path):
    camp = tmp_path / "c"
    (camp / "w1").mkdir(parents=True)
    (camp / "w1" / "vanilla_conc1.json").write_text(good())
    stage = fresh_staging(camp, "w1")
    (stage / "vanilla_conc1.json").write_text(good(node="w2"))
    got = accept(camp, "w1", EXPECT)
    [msg] = got.refused
    assert "its metadata says node 'w2', its folder 'w1'" in msg and "valid copy collected earlier is kept" in msg
    assert (camp / "w1" / "vanilla_conc1.json").read_text() == good()
