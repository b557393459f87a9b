"""Several files' states gathered in one probe (facts/gather.py merges FileState facts: one `stat` and
one `sha256sum` for all) read exactly as each fact's own command reads them, whatever the paths hold."""
from __future__ import annotations

import hashlib
import os

import pytest

from specfleet.facts.files import FileState
from specfleet.facts.gather import gather
from specfleet.shell import ProbeBatch
from specfleet.step import Step


class Reads(Step):
    """A step that only names facts (what a role's FileContent steps ask for, without deciding)."""

    name = "reads"

    def __init__(self, facts):
        self._facts = facts

    def facts(self):
        return self._facts

    def decide(self, facts):
        return []


def gathered(paths, diff=False):
    """(each path's value gathered in one batch, the batch's probe count, each path's value alone)."""
    import subprocess
    scripts = []

    def run(script, root):
        scripts.append(script)
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout
    facts = {str(i): FileState(str(p), want_sha256="0" * 64) for i, p in enumerate(paths)}
    [values] = gather([Reads(facts)], run, diff=diff)
    probes = scripts[0].count("@@SF-") if scripts else 0
    return values, probes, {k: f.gather_local() for k, f in facts.items()}


@pytest.fixture
def files(tmp_path):
    (tmp_path / "a").write_text("one\n")
    (tmp_path / "b b").write_bytes(b"\x00two")
    os.chmod(tmp_path / "b b", 0o600)
    odd = tmp_path / "c\\d\ne $(id)"  # sha256sum escapes such a name (a leading backslash on its line)
    odd.write_text("three")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    (tmp_path / "dir").mkdir()
    return tmp_path, [tmp_path / "a", tmp_path / "b b", odd]


def test_regular_files_read_in_one_probe_as_each_alone(files):
    _, regular = files
    values, probes, alone = gathered(regular)
    assert probes == 1
    assert values == alone
    assert values["0"].sha256 == hashlib.sha256(b"one\n").hexdigest() and values["0"].size == 4
    assert values["1"].mode == "600" and values["2"].sha256 == hashlib.sha256(b"three").hexdigest()


def test_a_link_a_directory_or_a_missing_file_among_them_reads_as_each_alone(files):
    tmp, regular = files
    values, probes, alone = gathered(regular + [tmp / "link", tmp / "absent", tmp / "dir"])
    assert probes == 1
    assert values == alone
    assert [values[k].state for k in ("3", "4", "5")] == ["link", "absent", "notfile"]


def test_under_diff_each_file_keeps_its_own_probe_and_its_content(files):
    _, regular = files
    values, probes, alone = gathered(regular, diff=True)
    assert probes == len(regular)
    assert values["0"].content == b"one\n"
