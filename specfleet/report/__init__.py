"""`fab report` and the SSH-free half of `fab collect`: read a collected folder, gate on node
equivalence, merge, and write the report; and `fab compare`. Entry points: `report_plan` (from a
plan), `report_campaign`. The rooms, each importing only those below it (docs/dev/map.md):
scan/ (what the folder holds) -> gates/ (may the nodes' runs be merged) -> tables/ (the merged
tables) -> render/ (the documents) -> build.py (the pipeline) and compare/ (`fab compare`).

The names below load on first use (PEP 562): pandas and matplotlib come with them."""
from importlib import import_module

_WHERE = {"EquivalenceRule": "gates.gate", "report_campaign": "build", "report_plan": "build"}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_WHERE[name]}", __name__), name)
