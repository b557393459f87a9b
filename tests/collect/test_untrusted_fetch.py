"""A hostile worker's run folder, fetched the way `fab collect` fetches it (listing, select, rsync
of the names that passed, accept), with the local rsync and no SSH: only regular files under the run
folder are taken, each within its size limit; a deep JSON is quarantined, never a RecursionError;
every refused entry is named with its rule and the rest of the host's results still land."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from specfleet import untrusted_json
from specfleet.collect import untrusted
from specfleet.collect.fetch import discard_staging, rsync_argv, select
from specfleet.resultfile.schema import ResultError, load_result
from specfleet.collect.staging import STAGING_DIR, accept, fresh_staging, refuse_unfetched
from specfleet.collect.untrusted import Limits, listing_script, parse_listing
from specfleet.quoting import q

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures"


def _good_result() -> str:
    """A real result, as the runner of host w1 (the folder these tests fetch into) writes it."""
    src = next(p for p in sorted(FIXTURE.rglob("vanilla_conc*.json")))
    return json.dumps({**json.loads(src.read_text()), "node": "w1"})


def _run(tmp_path: Path, folder: Path, done: list[str], limits: Limits):
    listed = parse_listing(subprocess.run(["bash", "-c", listing_script(q(folder))], capture_output=True,
                                          text=True).stdout)
    take, bad = select(listed, done, limits)
    dest = tmp_path / "results"
    stage = fresh_staging(dest, "w1")
    argv = rsync_argv(f"{folder}/", stage, None, [], limits)
    p = subprocess.run(argv, input="".join(n + "\0" for n in take), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    got = accept(dest, "w1", None, limits)
    discard_staging(dest, "w1")
    got.refused += refuse_unfetched(dest, "w1", bad)
    return dest, got


def test_a_hostile_run_folder_gives_only_its_regular_files(tmp_path):
    secret = tmp_path / "bastion-secret.txt"  # a file of the bastion the worker must not reach
    secret.write_text("root-only\n")
    w = tmp_path / "worker"
    w.mkdir()
    good = _good_result()
    conc = json.loads(good)["max_concurrency"]
    (w / "state.json").write_text(json.dumps({"items": [{"name": "vanilla", "status": "done"}]}))
    for cfg in ("vanilla", "linked", "fifo", "hard", "big", "deep"):
        (w / f"{cfg}.done").write_text("{}")
    (w / f"vanilla_conc{conc}.json").write_text(good)
    os.symlink(secret, w / f"linked_conc{conc}.json")             # a link to a bastion path
    os.mkfifo(w / f"fifo_conc{conc}.json")                        # reading it would block
    outside = tmp_path / "worker-etc-shadow"
    outside.write_text(good)
    os.link(outside, w / f"hard_conc{conc}.json")                 # a hard link out of the run folder
    (w / f"big_conc{conc}.json").write_text(" " * 3000 + good)    # over the test limit below
    (w / f"deep_conc{conc}.json").write_text("[" * 50_000 + "]" * 50_000)  # within the size limit
    (w / "vanilla.server.log").write_text("log line\n" * 10)
    limits = Limits(result_bytes=len(good) + 1000, log_bytes=10_000)

    dest, got = _run(tmp_path, w, ["vanilla", "linked", "fifo", "hard", "big", "deep"], limits)
    host = dest / "w1"
    # the rest of the host's results are collected
    assert (host / f"vanilla_conc{conc}.json").read_text() == good
    assert (host / "vanilla.server.log").is_file() and (host / "state.json").is_file()
    # nothing refused reached the host folder, and nothing there is a link
    for cfg in ("linked", "fifo", "hard", "big", "deep"):
        assert not os.path.lexists(host / f"{cfg}_conc{conc}.json"), cfg
    assert not any(p.is_symlink() or not p.is_file() for p in host.iterdir())
    assert "root-only" not in "".join(p.read_text() for p in host.iterdir())
    # each refused entry named in one line with the rule it broke, and recorded in quarantine
    msgs = {m.split(" ", 1)[0]: m for m in got.refused}
    assert all("\n" not in m for m in got.refused)
    assert "symbolic link" in msgs[f"w1:linked_conc{conc}.json"]
    assert "FIFO" in msgs[f"w1:fifo_conc{conc}.json"]
    assert "hard link" in msgs[f"w1:hard_conc{conc}.json"]
    assert "over the" in msgs[f"w1:big_conc{conc}.json"] and "collect.max_result_mb" in msgs[f"w1:big_conc{conc}.json"]
    assert "nested" in msgs[f"w1:deep_conc{conc}.json"]
    qdir = dest / "quarantine" / "w1"
    for cfg in ("linked", "fifo", "hard", "big"):
        assert (qdir / f"{cfg}_conc{conc}.json.reason.txt").is_file(), sorted(os.listdir(qdir))
        assert not os.path.lexists(qdir / f"{cfg}_conc{conc}.json")  # never fetched: no content kept
    assert "nested" in (qdir / f"deep_conc{conc}.json.reason.txt").read_text()
    # nothing half-done stays: no staging folder at all
    assert not (dest / STAGING_DIR).exists()


def test_a_link_swapped_in_after_the_listing_is_refused_unread(tmp_path):
    """The listing said regular file; rsync found a link (copied as a link): accept refuses it by lstat."""
    dest = tmp_path / "results"
    stage = fresh_staging(dest, "w1")
    os.symlink("/etc/shadow", stage / "vanilla_conc1.json")
    os.mkfifo(stage / "ngram_conc1.json")
    got = accept(dest, "w1", None, Limits.default())
    assert not os.path.lexists(dest / "w1" / "vanilla_conc1.json")
    assert any("symbolic link to '/etc/shadow'" in m for m in got.refused), got.refused
    assert any("FIFO" in m for m in got.refused), got.refused


def test_names_that_are_not_plain_names_are_refused():
    lim = Limits.default()
    for name in ("..", ".", "-rf", "a\nb", "x\x1b[31m"):
        assert untrusted.refusal(name, "f", 1, 10, lim), name
    assert untrusted.refusal("vanilla_conc1.json", "f", 1, 10, lim) is None


def test_deep_json_is_refused_in_linear_time_not_a_recursion_error(tmp_path):
    f = tmp_path / "deep_conc1.json"
    f.write_text("[" * 1_000_000 + "]" * 1_000_000)
    with pytest.raises(ResultError) as e:
        load_result(f)
    assert "nested 1000000 levels deep" in e.value.problem
    with pytest.raises(untrusted_json.UntrustedJSON):
        untrusted_json.loads('{"a": ' * 100 + "1" + "}" * 100)
    # brackets inside strings do not count, an ordinary result parses
    assert untrusted_json.loads(json.dumps({"s": "[" * 500, "l": [[1], [2]]})) == {"s": "[" * 500, "l": [[1], [2]]}
    assert untrusted_json.json_depth(_good_result()) <= 4
    with pytest.raises(untrusted_json.UntrustedJSON):
        untrusted_json.loads("[1]" * 10, max_bytes=5)


def test_the_limits_are_plan_fields_not_in_the_plan_hash():
    from specfleet.plan import parse_plan
    import yaml
    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "e2e/plans/fast.yml").read_text())
    p = parse_plan(raw, Path("fast.yml"))
    assert Limits.of_plan(p) == Limits.default()
    raw["collect"] = {"max_result_mb": 1, "max_log_mb": 2}
    p2 = parse_plan(raw, Path("fast.yml"))
    assert Limits.of_plan(p2) == Limits(2**20, 2 * 2**20)
    assert p2.plan_hash() == p.plan_hash()
