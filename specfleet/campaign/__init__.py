"""`fab bench`'s SSH-free parts: plan file, split across nodes, commands, worker-side runner.

The bastion side calls: load_plan -> split -> build_run_spec (per node) -> copy RUNNER_FILES and
the spec to the worker -> start runner.py detached; commands_for prints the plan. docs/campaign.md.
"""
from .commands import Paths, commands_for
from ..plan import Plan, PlanError, load_plan, parse_plan
from .spec import RUNNER_FILES, build_run_spec, dump_run_spec
from .split import REPORT_DURATIONS, NodeInfo, Split, format_split, parse_pins, split

__all__ = ["Paths", "commands_for", "Plan", "PlanError", "load_plan", "parse_plan", "RUNNER_FILES",
           "build_run_spec", "dump_run_spec", "REPORT_DURATIONS", "NodeInfo", "Split", "format_split",
           "parse_pins", "split"]
