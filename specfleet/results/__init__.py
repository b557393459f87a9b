"""The local half of `fab collect` and all of `fab report`: validate result files, gate on node
equivalence, merge, and report. Entry points: `report_plan` (from a plan), `report_campaign`."""
from .campaign import Campaign, Quarantined, scan_campaign
from .gate import EquivalenceRule, GateResult, check_equivalence
from .schema import Result, ResultError, load_result

__all__ = [
    "Campaign", "Quarantined", "scan_campaign", "EquivalenceRule", "GateResult",
    "check_equivalence", "Result", "ResultError", "load_result",
]
from .collect import CollectOutcome, report_campaign, report_plan  # noqa: E402

__all__ += ["CollectOutcome", "report_campaign", "report_plan"]
