"""The local half of `fab collect` and all of `fab report`: validate result files, gate on node
equivalence, merge, and report. Entry points: `report_plan` (from a plan), `report_campaign`.

The names below load on first use (PEP 562): pandas and matplotlib come with them, and `fab`
itself imports `specfleet.collect.fetch` at start, which must stay light."""
from importlib import import_module

_WHERE = {"EquivalenceRule": "gates.gate", "report_campaign": "build", "report_plan": "build"}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_WHERE[name]}", __name__), name)
