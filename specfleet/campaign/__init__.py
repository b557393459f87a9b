"""The bastion's campaign: split across nodes, commands, run specs, placement, following.

The bastion side calls: load_plan -> split -> build_run_spec (per node) -> place the worker program
(worker_zipapp, the configs role) and the spec on the worker -> start runner.pyz detached;
commands_for prints the plan. docs/campaign.md.
"""
from .commands import Paths, commands_for
from ..plan import Plan, PlanError, load_plan, parse_plan
from .spec import build_run_spec, dump_run_spec, worker_zipapp
from .schedule.split import REPORT_DURATIONS, NodeInfo, Split, format_split, parse_pins, split

__all__ = ["Paths", "commands_for", "Plan", "PlanError", "load_plan", "parse_plan", "worker_zipapp",
           "build_run_spec", "dump_run_spec", "REPORT_DURATIONS", "NodeInfo", "Split", "format_split",
           "parse_pins", "split"]
