"""Hostile paths through a whole step, run by the local bash: facts gathered, changes applied,
the second pass finds nothing to do, and nothing the path names as code ran."""
from __future__ import annotations

import subprocess

import pytest

from specfleet.facts.gather import gather_here
from specfleet.steps.files import Directory, FileContent, LineInFile

NAMES = ["my dir/it's $(touch pwned)`touch pwned2`", "nl\ninside/x y"]


def converge(step, cwd):
    rounds = 0
    while True:
        (values,) = gather_here([step], str(cwd))
        assert not isinstance(values, Exception), values
        changes = step.decide(values)
        if not changes:
            return rounds
        rounds += 1
        assert rounds < 3, changes
        for c in changes:
            p = subprocess.run(["bash", "-c", "set -e\n" + c.script], cwd=cwd, capture_output=True,
                               input=b"".join(c.payload.chunks()) if c.payload else b"")
            assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("name", NAMES)
def test_a_line_into_a_new_file_under_a_hostile_directory(tmp_path, name):
    path = tmp_path / name / "fstab"
    step = LineInFile(str(path), "a line; $(touch pwned)")
    assert converge(step, tmp_path) == 1 and converge(step, tmp_path) == 0
    assert path.read_text() == "a line; $(touch pwned)\n"
    assert not list(tmp_path.rglob("pwned*"))


@pytest.mark.parametrize("name", NAMES)
def test_files_and_directories_under_hostile_names(tmp_path, name):
    for step in (Directory(str(tmp_path / name / "d")), FileContent(str(tmp_path / name / "f"), "x\n")):
        assert converge(step, tmp_path) == 1 and converge(step, tmp_path) == 0
    assert (tmp_path / name / "f").read_text() == "x\n" and (tmp_path / name / "d").is_dir()
    assert not list(tmp_path.rglob("pwned*"))
