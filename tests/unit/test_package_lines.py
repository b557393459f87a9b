"""scripts/package-lines: the size figures issue 22 is judged by (docs/dev/map.md)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_lines_are_split_into_blank_comment_docstring_and_code(tmp_path):
    (tmp_path / "m.py").write_text('"""Module\ndocstring."""\n\n# why\nx = 1\n\n\n'
                                   'def f():\n    """One."""\n    return "#"\n')
    out = subprocess.run([sys.executable, str(ROOT / "scripts/package-lines"), str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    total = out.splitlines()[-1].split()
    assert total == ["total", "10", "3", "1", "3", "3"], out
