"""docs/reference.md is what the tasks print: regenerate with scripts/gen-cli-reference."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_committed_reference_matches_the_tasks():
    p = subprocess.run([sys.executable, str(ROOT / "scripts/gen-cli-reference"), "--check"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr


def test_every_task_is_in_the_reference():
    sys.path.insert(0, str(ROOT))
    from fabfile import ns
    text = (ROOT / "docs/reference.md").read_text()
    for name in ns.task_names:
        assert f"## fab {name}\n" in text
