"""The import rules of pyproject.toml ([tool.importlinter]) hold: tasks -> backend -> slurm -> roles -> core
-> worker, never upward; the tasks reach a backend only through specfleet.backend (backend_for); the worker program imports nothing else of specfleet; collect and report never import
each other; the report's rooms never import upward; the campaign imports neither collect nor report;
no import cycle in any package.

lint-imports runs on the checkout as it is, from the repository root, as a developer runs it: roles/,
tasks/ and templates/ are seen as specfleet.roles, .tasks, .templates through the committed symlinks
in specfleet/.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = str(Path(sys.executable).parent / "lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})


def checkout_copy(tmp: Path, extra: dict[str, str]) -> Path:
    """The checkout's package as it lies (symlinks kept as links), plus the given files."""
    skip = shutil.ignore_patterns("__pycache__")
    for part in ("specfleet", "roles", "tasks", "templates"):
        shutil.copytree(ROOT / part, tmp / part, symlinks=True, ignore=skip)
    shutil.copy2(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    for rel, body in extra.items():
        (tmp / rel).write_text(body)
    return tmp


def test_the_parts_at_the_top_level_are_the_packages_symlinks():
    for part in ("roles", "tasks", "templates"):
        link = ROOT / "specfleet" / part
        assert link.is_symlink() and os.readlink(link) == f"../{part}", part


def test_the_checkout_keeps_its_import_rules():
    p = lint(ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "7 kept, 0 broken" in p.stdout, p.stdout


def test_an_upward_import_a_worker_import_a_crossing_and_a_cycle_are_each_caught(tmp_path):
    """The rules can fail (a check that cannot fail proves nothing), lazy and annotation-only imports
    included; the upward
    import goes into a role behind the symlink, so a part at the top level is checked too."""
    p = lint(checkout_copy(tmp_path, {
        "specfleet/steps/extra.py": "def f():\n    from ..roles import configs\n",     # core -> roles
        "roles/leak.py": "from specfleet.tasks import bench\n",                         # roles -> tasks
        "specfleet/worker/leak.py": "from ..plan import Plan\n",                        # worker -> plan
        "specfleet/report/scan/loop_a.py": "from . import loop_b\n",
        "specfleet/report/scan/loop_b.py": "def g():\n    from . import loop_a\n",        # a cycle
        "specfleet/plan/note_a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import note_b\n",
        "specfleet/plan/note_b.py": "from . import note_a\n",                              # a cycle by annotation
        "specfleet/collect/leak.py": "def h():\n    from ..report.scan import folder\n",   # collect -> report
        "specfleet/report/gates/up.py": "def u():\n    from ..render import document\n",  # a room upward
        "specfleet/campaign/leak.py": "from ..report.scan import cells\n",                 # campaign -> report
        "tasks/branch.py": "def b():\n    from specfleet.slurm import dispatch\n",        # a task past its backend
    }))
    assert p.returncode == 1, p.stdout
    assert "0 kept, 7 broken" in p.stdout, p.stdout
    for edge in ("specfleet.steps.extra -> specfleet.roles.configs", "specfleet.roles.leak -> specfleet.tasks.bench",
                 "specfleet.worker.leak -> specfleet.plan", ".loop_b -> .loop_a", "No cycles are allowed in specfleet.plan",
                 "specfleet.collect.leak -> specfleet.report.scan.folder",
                 "specfleet.report.gates.up -> specfleet.report.render.document",
                 "specfleet.campaign.leak -> specfleet.report.scan.cells",
                 "specfleet.tasks.branch -> specfleet.slurm.dispatch"):
        assert edge in p.stdout, (edge, p.stdout)
