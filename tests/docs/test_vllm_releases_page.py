"""docs/vllm-releases.md is the release matrix's data file: regenerate with scripts/vllm-matrix --docs."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_release_page_matches_the_matrix():
    p = subprocess.run([sys.executable, str(ROOT / "scripts/vllm-matrix"), "--docs", "--check"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
