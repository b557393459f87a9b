"""scripts/package-growth: the package's lines per commit of main since a tree, summed by the issue
each change served (docs/dev/map.md). Run on a small repository built here, with known counts."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
       "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=ENV, capture_output=True, text=True, check=True).stdout


def commit_lines(repo: Path, path: str, n: int, message: str) -> str:
    f = repo / path
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text("x = 1\n" * n)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD").strip()


def test_rows_and_sums_by_issue(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = commit_lines(repo, "specfleet/a.py", 100, "the tree the issue measured")
    commit_lines(repo, "docs/notes.py", 50, "outside the package: no row")
    git(repo, "checkout", "-qb", "h-peers")
    commit_lines(repo, "specfleet/results/compare.py", 40, "a feature")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge branch 'h-peers' into integration", "h-peers")
    git(repo, "checkout", "-qb", "h-worker")
    commit_lines(repo, "specfleet/a.py", 70, "the house: 30 lines fewer")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge branch 'h-worker' into integration", "h-worker")
    commit_lines(repo, "roles/r.py", 5, "a commit nobody labelled")
    commit_lines(repo, "specfleet/a.py", 60, "a commit that says its issue\n\nwhy, at length\n\nIssue: 22")

    out = subprocess.run([sys.executable, str(ROOT / "scripts/package-growth"), "--repo", str(repo), base],
                         capture_output=True, text=True, check=True).stdout
    table = out.split("\n\n")[0].splitlines()[2:]  # under the heading and the (from) row
    rows = [tuple(ln.split()[1:4]) for ln in table]
    assert rows == [("26", "+40", "140"), ("22", "-30", "110"), ("?", "+5", "115"), ("22", "-10", "105")], out
    assert "the house (issue 22) -40; the same behaviour as at" in out and out.rstrip().endswith(": 60 lines"), out
