"""specfleet: a fleet runner for GPU inference benchmark campaigns.

In a checkout the design card's top level holds three of the package's parts: roles/, tasks/ and
templates/ beside specfleet/ (pyproject.toml maps them to specfleet.roles, .tasks, .templates, so
the wheel has them inside the package). The finder below resolves those three names to the folders
beside this package, so a checkout (or a copy of one) on PYTHONPATH imports its own parts.
"""
from __future__ import annotations

import sys
from importlib.machinery import PathFinder
from pathlib import Path

_PARTS = ("roles", "tasks", "templates")
_ROOT = Path(__file__).resolve().parent.parent


class _TopLevelParts:
    """Meta path finder for specfleet.roles/.tasks/.templates in a checkout (a no-op in a wheel)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        head, _, part = name.partition(".")
        if head != __name__ or part not in _PARTS or (Path(__path__[0]) / part).is_dir():
            return None
        return PathFinder.find_spec(name, [str(_ROOT)])


if not (Path(__file__).parent / "roles").is_dir():  # a checkout, not an installed wheel
    sys.meta_path.insert(0, _TopLevelParts)
