"""The import rules of pyproject.toml ([tool.importlinter]) hold: tasks -> roles -> core -> worker,
never upward; the worker program imports nothing else of specfleet; no import cycle in any package.

lint-imports reads the package as the wheel lays it out: a checkout keeps roles/, tasks/ and
templates/ beside specfleet/ (the design card's top level), so they are copied inside it first.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = str(Path(sys.executable).parent / "lint-imports")


def wheel_layout(tmp: Path, extra: dict[str, str] | None = None) -> Path:
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "specfleet", tmp / "specfleet", ignore=skip)
    for part in ("roles", "tasks", "templates"):
        shutil.copytree(ROOT / part, tmp / "specfleet" / part, ignore=skip)
    shutil.copy2(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    for rel, body in (extra or {}).items():
        (tmp / rel).write_text(body)
    return tmp


def lint(tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--no-cache", str(tmp / "pyproject.toml")], cwd=tmp, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(tmp)})


def test_the_package_keeps_its_import_rules(tmp_path):
    p = lint(wheel_layout(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "3 kept, 0 broken" in p.stdout, p.stdout


def test_an_upward_import_a_worker_import_and_a_cycle_are_each_caught(tmp_path):
    """The rules can fail (a check that cannot fail proves nothing), lazy imports included."""
    p = lint(wheel_layout(tmp_path, {
        "specfleet/steps/extra.py": "def f():\n    from ..roles import configs\n",     # core -> roles
        "specfleet/worker/leak.py": "from ..plan import Plan\n",                        # worker -> plan
        "specfleet/results/loop_a.py": "from . import loop_b\n",
        "specfleet/results/loop_b.py": "def g():\n    from . import loop_a\n",        # a cycle
    }))
    assert p.returncode == 1, p.stdout
    assert "0 kept, 3 broken" in p.stdout, p.stdout
    for edge in ("specfleet.steps.extra -> specfleet.roles.configs", "specfleet.worker.leak -> specfleet.plan",
                 ".loop_b -> .loop_a"):
        assert edge in p.stdout, (edge, p.stdout)
