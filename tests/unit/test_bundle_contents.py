"""What `fab bundle` puts in (specfleet.tasks.bundle): the platform tags pip is given, and which files
of plans/, datasets/sample, ... go in. The build itself, with the package index: tests/docs/test_bundle.py."""
from __future__ import annotations

import subprocess
from pathlib import Path

from specfleet.tasks.bundle import SHIPPED, expand_platforms, shipped_files


def test_a_manylinux_tag_takes_every_older_one_as_its_glibc_does():
    """docs/bastion.md's `--platform manylinux_2_39_x86_64`: pandas ships manylinux_2_17 wheels only, and
    pip takes each --platform as one exact tag."""
    tags = expand_platforms(["manylinux_2_39_x86_64"])
    assert tags[0] == "manylinux_2_39_x86_64"
    for older in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                  "manylinux2010_x86_64", "manylinux1_x86_64"):
        assert older in tags, older
    assert "manylinux_2_16_x86_64" not in tags and not any("aarch64" in t for t in tags)
    assert expand_platforms(["manylinux_2_28_aarch64"])[-1] == "manylinux2014_aarch64"


def test_several_tags_repeated_or_comma_separated_each_once():
    assert expand_platforms(["linux_x86_64,manylinux_2_17_x86_64", "linux_x86_64"]) == [
        "linux_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    assert expand_platforms(["macosx_11_0_arm64"]) == ["macosx_11_0_arm64"]


def _tree(root: Path) -> None:
    for rel in ("fabfile.py", "plans/demo.yml", "plans/draft.yml", "datasets/sample/question.jsonl",
                "datasets/sample/mine.jsonl", "inventory/example.yml", "inventory/hosts.yml", "docs/requirements.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel + "\n")


def test_only_tracked_files_go_in(tmp_path):
    _tree(tmp_path)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    tracked = ["fabfile.py", "plans/demo.yml", "datasets/sample/question.jsonl", "inventory/example.yml",
               "docs/requirements.txt"]
    subprocess.run(git + ["add", *tracked], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    files, note = shipped_files(tmp_path)
    assert files == sorted(tracked) and note is None  # the draft plan, the local dataset, hosts.yml stay out


def test_outside_a_git_checkout_everything_under_the_shipped_paths_goes_in_and_says_so(tmp_path):
    _tree(tmp_path)
    files, note = shipped_files(tmp_path)
    assert "plans/draft.yml" in files and "datasets/sample/mine.jsonl" in files
    assert "inventory/hosts.yml" not in files  # only inventory/example.yml is shipped
    assert "not a git checkout" in note and all(s in note for s in SHIPPED)
