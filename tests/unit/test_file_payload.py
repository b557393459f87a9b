"""FileContent with a payload: facts (mode, size, sha256) in, changes with a payload out.

Where a test runs generated shell text, it runs it with the local bash, the payload on its
stdin, as the fleet does on a host (tests/e2e/test_payload.py does it over SSH).
"""
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from specfleet.fleet import _commands
from specfleet.facts.files import HostFile
from specfleet.step import Change, Payload, StepFailed
from specfleet.steps.files import DIFF_MAX_BYTES, FileContent

from test_steps import converge, facts_of, sh
from tests.shared_data import SPEC_BENCH



def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def host_facts(mode: str, data: bytes, *, content: bool = False) -> dict:
    """The file fact of a host file holding `data` (content only as under --diff)."""
    return {"file": HostFile("file", mode, len(data), sha(data), data if content else None)}


# ------------------------------------------------------------ facts in, changes out
def test_absent_file_is_created_with_the_content_as_payload_not_in_the_script():
    data = os.urandom(1 << 20)  # 1 MiB: as base64 in the command text it broke bash and sshd
    step = FileContent("/var/lib/specfleet/datasets/q.bin", data)
    [c] = step.decide({"file": HostFile("absent")})
    assert c.summary == "create /var/lib/specfleet/datasets/q.bin"
    assert c.payload is not None and c.payload.size == len(data) and c.payload.sha256 == sha(data)
    assert b"".join(c.payload.chunks()) == data
    assert len(c.script) < 2000 and sha(data) in c.script


def test_same_checksum_and_mode_is_no_change():
    data = b"nvidia\nnvidia_uvm\n"
    assert FileContent("/etc/m.conf", data, mode="0644").decide(host_facts("644", data)) == []


def test_same_checksum_other_mode_is_a_chmod_only():
    data = b"A=1\n"
    [c] = FileContent("/etc/e", data, mode="0644").decide(host_facts("600", data))
    assert c.summary == "chmod 0644 /etc/e" and c.payload is None and c.diff == "mode 600 -> 0644"


def test_other_checksum_is_an_update_with_payload():
    old, new = b"old\n", b"new\n"
    [c] = FileContent("/etc/m.conf", new).decide(host_facts("644", old))
    assert c.summary == "update /etc/m.conf" and c.payload.sha256 == sha(new)
    # without --diff the host's content was never fetched: the diff names the checksums
    assert c.diff == f"sha256 {sha(old)} -> {sha(new)}"


def test_absent_wanted_removes_an_existing_file():
    [c] = FileContent("/etc/m.conf", present=False).decide(host_facts("644", b"x\n"))
    assert c.summary == "remove /etc/m.conf" and c.payload is None
    assert FileContent("/etc/m.conf", present=False).decide({"file": HostFile("absent")}) == []


def test_not_a_regular_file_fails():
    with pytest.raises(StepFailed, match="not a regular file"):
        FileContent("/etc/m.conf", b"x").decide({"file": HostFile("notfile")})


def test_diff_small_text_is_a_unified_diff():
    [c] = FileContent("/etc/m.conf", b"a\nb\n").decide(host_facts("644", b"a\n", content=True))
    assert "+b" in c.diff and "/etc/m.conf (host)" in c.diff


def test_diff_large_or_binary_says_so_with_both_checksums():
    big_old, big_new = b"x" * (DIFF_MAX_BYTES + 1), b"y" * (DIFF_MAX_BYTES + 1)
    # a large host file: the probe sent no content, its size says why
    [c] = FileContent("/d/q.jsonl", big_new).decide(host_facts("644", big_old))
    assert c.diff == f"binary or large file: sha256 {sha(big_old)} -> {sha(big_new)}"
    # binary content on either side
    [c] = FileContent("/d/b", b"\0\1\2").decide(host_facts("644", b"text\n", content=True))
    assert c.diff.startswith("binary or large file: sha256 ")
    [c] = FileContent("/d/b", b"text\n").decide(host_facts("644", b"\xff\xfe\0", content=True))
    assert c.diff.startswith("binary or large file: sha256 ")
    [c] = FileContent("/d/q.jsonl", big_new).decide({"file": HostFile("absent")})
    assert c.diff == f"binary or large file: sha256 absent -> {sha(big_new)}"


# ------------------------------------------------------------ the probe
def test_probe_brings_back_a_checksum_never_the_content(tmp_path):
    f = tmp_path / "q.jsonl"
    f.write_bytes(os.urandom(300_000))
    f.chmod(0o640)
    for diff in (False, True):  # --diff fetches small files only
        facts = facts_of(FileContent(str(f), b"other"), tmp_path, diff=diff)
        assert facts["file"] == HostFile("file", "640", 300000, sha(f.read_bytes()), None)


def test_probe_under_diff_fetches_a_small_differing_file(tmp_path):
    f = tmp_path / "m.conf"
    f.write_text("old\n")
    assert facts_of(FileContent(str(f), "new\n"), tmp_path)["file"].content is None
    assert facts_of(FileContent(str(f), "old\n"), tmp_path, diff=True)["file"].content is None  # same
    assert facts_of(FileContent(str(f), "new\n"), tmp_path, diff=True)["file"].content == b"old\n"
    [c] = FileContent(str(f), "new\n").decide(facts_of(FileContent(str(f), "new\n"), tmp_path, diff=True))
    assert "-old" in c.diff and "+new" in c.diff


# ------------------------------------------------------------ the receiving script
def test_receive_writes_atomically_mode_before_rename(tmp_path):
    """A stand-in `mv` records the temp file's mode and directory at the moment of the rename."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "mv.log"
    (bin_dir / "mv").write_text(f'#!/bin/sh\nstat -c "%a %n" "$3" >> {log}\nexec /bin/mv "$@"\n')
    (bin_dir / "mv").chmod(0o755)
    target = tmp_path / "d" / "run.json"
    [c] = FileContent(str(target), b'{"a": 1}\n', mode="0750").decide({"file": HostFile("absent")})
    p = sh(f"PATH={bin_dir}:$PATH\nset -e\n" + c.script, tmp_path, b"".join(c.payload.chunks()))
    assert p.returncode == 0, p.stderr
    mode, tmp_name = log.read_text().split()
    assert mode == "750" and Path(tmp_name).parent == target.parent
    assert target.read_bytes() == b'{"a": 1}\n' and oct(target.stat().st_mode & 0o777) == "0o750"
    assert os.listdir(target.parent) == ["run.json"]


@pytest.mark.parametrize("sent", [b"hello\nwor", b"hello\nWORLD\n", b""])
def test_receive_refuses_a_stream_that_is_not_the_payload(tmp_path, sent):
    target = tmp_path / "f"
    target.write_bytes(b"the old content\n")
    [c] = FileContent(str(target), b"hello\nworld\n").decide(facts_of(FileContent(str(target)), tmp_path))
    p = sh("set -e\n" + c.script, tmp_path, sent)  # cut short, or corrupted on the way
    assert p.returncode == 1 and f"received {len(sent)} bytes, expected 12 bytes" in p.stderr
    assert target.read_bytes() == b"the old content\n" and os.listdir(tmp_path) == ["f"]


def test_fifty_megabytes_from_a_bastion_file(tmp_path):
    src = tmp_path / "big.bin"
    with open(src, "wb") as f:
        for _ in range(50):
            f.write(os.urandom(1 << 20))
    target = tmp_path / "host" / "big.bin"
    step = FileContent(str(target), source=src)
    [c] = step.decide(facts_of(step, tmp_path))
    assert c.payload.source == str(src) and c.payload.data is None and len(c.script) < 2000
    assert converge(step, tmp_path) == 1
    assert sha(target.read_bytes()) == sha(src.read_bytes())
    assert converge(step, tmp_path) == 0


def test_the_real_spec_bench_file(tmp_path):
    if not SPEC_BENCH.is_file():
        pytest.skip(f"{SPEC_BENCH} is absent (the real 698 KB Spec-Bench file)")
    target = tmp_path / "datasets" / "question.jsonl"
    step = FileContent(str(target), source=SPEC_BENCH)
    assert converge(step, tmp_path) == 1 and converge(step, tmp_path) == 0
    assert target.read_bytes() == SPEC_BENCH.read_bytes()


def test_payload_of_file_follows_the_file(tmp_path):
    f = tmp_path / "q"
    f.write_bytes(b"one")
    a = Payload.of_file(f)
    f.write_bytes(b"two!")
    b = Payload.of_file(f)
    assert (a.sha256, a.size) == (sha(b"one"), 3) and (b.sha256, b.size) == (sha(b"two!"), 4)


def test_payload_changes_run_as_their_own_commands():
    p = Payload.of_bytes(b"x")
    changes = [Change("a", "A"), Change("b", "B"), Change("c", "C", payload=p), Change("d", "D"),
               Change("e", local_argv=["rsync"]), Change("f", "F")]
    assert _commands(changes) == [(["A", "B"], None), (["C"], p), (["D", "F"], None)]
