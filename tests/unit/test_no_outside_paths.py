"""Code and docs cite nothing outside the repository: no absolute path of a development machine
(/work/...) and no notes kept beside the checkout (shared/notes/..., nor a section of them: "notes A2",
"vllm.md A3", "the shared notes"). Data too large to commit is
reached through tests/shared_data.py (`shared/` beside the checkout), and only there."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = ("/work/", "shared/notes/", "notes/vllm.md", "notes/testbed.md", "notes/slurm.md", "notes/anchors.md")
# a section of those notes cited by its number, or the notes by name
CITED = re.compile(r"\bnotes [A-Z]\d|\b(vllm|testbed|slurm|anchors)\.md [A-Z]\d|\bshared notes\b")


def test_no_tracked_file_cites_a_path_outside_the_repository():
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    hits = []
    for name in files:
        path = ROOT / name
        if not name or name == "tests/unit/test_no_outside_paths.py" or not path.is_file() or path.is_symlink():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary: images, archives
        hits += [f"{name}:{n}: {line.strip()[:120]}" for n, line in enumerate(text.splitlines(), 1)
                 if any(o in line for o in OUTSIDE) or CITED.search(line)]
    assert hits == [], "\n".join(hits)
