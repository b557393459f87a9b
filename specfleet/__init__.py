"""specfleet: a fleet runner for GPU inference benchmark campaigns.

A checkout keeps three parts of the package at the top level (roles/, tasks/, templates/ beside
specfleet/); pyproject.toml maps them into the wheel as specfleet.roles, .tasks, .templates, and in a
checkout (or a copy of one on PYTHONPATH) the finder below imports them from beside this package.
"""
from __future__ import annotations

import sys
from importlib.machinery import PathFinder
from pathlib import Path

_PARTS, _HERE = ("roles", "tasks", "templates"), Path(__file__).resolve().parent


class _TopLevelParts:
    @staticmethod
    def find_spec(name, path=None, target=None):
        head, _, part = name.partition(".")
        return PathFinder.find_spec(name, [str(_HERE.parent)]) if head == __name__ and part in _PARTS else None


if not (_HERE / "roles").is_dir():  # a checkout, not an installed wheel
    sys.meta_path.insert(0, _TopLevelParts)
