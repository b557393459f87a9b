"""Steps from fixture files: facts in, changes out (as pyinfra's tests/operations).

Each tests/steps/<module>.<Step>/<case>.json holds:
  "args", "kwargs"  the step's constructor arguments ({"$step": ..., "args": [...]} builds a step,
                    for a step that wraps another: OnlyIf)
  "facts"           the value of every fact the step asks for (by its name in `facts()` and
                    `bastion_facts()`), as JSON; the harness checks the names are exactly those
  "changes"         the changes `decide` returns, each {"summary", "script", "diff"?, "local_argv"?}:
                    the script text is exact, so a hostile value shows how it is quoted
  "error"           instead of "changes": a substring of the StepFailed message
  "report"          optional: what `report` returns
<module> is looked up under specfleet.steps, specfleet.roles and specfleet (e.g.
files.Directory, nvidia.DriverLoaded, campaign.schedule.bounds.pigeonhole_bound). A directory may also name a pure function
(e.g. campaign.schedule.bounds.pigeonhole_bound, network.find_duplicates): then "kwargs" in, "value" out.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import subprocess
from pathlib import Path

import pytest

from specfleet.facts.base import from_json
from specfleet.step import Step, StepFailed

HERE = Path(__file__).parent
CASES = sorted(HERE.glob("*/*.json"))
PACKAGES = ("specfleet.steps.", "specfleet.roles.", "specfleet.")


def resolve(dirname: str):
    module, _, name = dirname.rpartition(".")
    for prefix in PACKAGES:
        try:
            return getattr(importlib.import_module(prefix + module), name)
        except ModuleNotFoundError:
            continue
    raise LookupError(f"no module {module!r} under {PACKAGES}")


def plain(value):
    """A result as JSON would hold it (dataclasses as dicts, tuples as lists)."""
    if dataclasses.is_dataclass(value):
        return {k: plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def build(arg):
    """An argument as written in a fixture; {"$step": "files.Directory", "args": [...]} is a step."""
    if isinstance(arg, dict) and "$step" in arg:
        return resolve(arg["$step"])(*[build(a) for a in arg.get("args", [])], **arg.get("kwargs", {}))
    return arg


def load_values(step: Step, given: dict) -> dict:
    declared = step.facts()
    values = {n: from_json(f.value_type(), given[n]) for n, f in declared.items() if n in given}
    missing = set(declared) - set(values)
    assert not missing, f"the fixture lacks facts the step asks for: {sorted(missing)}"
    late = step.bastion_facts(values)
    values.update({n: from_json(f.value_type(), given[n]) for n, f in late.items() if n in given})
    missing = set(late) - set(values)
    assert not missing, f"the fixture lacks bastion facts the step asks for: {sorted(missing)}"
    extra = set(given) - set(declared) - set(late)
    assert not extra, f"the fixture gives facts the step does not ask for: {sorted(extra)}"
    return values


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_step_fixture(path):
    case = json.loads(path.read_text())
    target = resolve(path.parent.name)
    if not (inspect.isclass(target) and issubclass(target, Step)):
        got = target(*case.get("args", []), **case.get("kwargs", {}))
        assert plain(got) == pytest.approx(case["value"]) if isinstance(case["value"], float) else \
            plain(got) == case["value"]
        return
    step = target(*[build(a) for a in case.get("args", [])], **case.get("kwargs", {}))
    values = load_values(step, case.get("facts", {}))
    if "error" in case:
        with pytest.raises(StepFailed) as e:
            step.decide(values)
        assert case["error"] in str(e.value)
        return
    changes = step.decide(values)
    want = case["changes"]
    assert [c.summary for c in changes] == [w["summary"] for w in want]
    for c, w in zip(changes, want):
        assert c.script == w.get("script", ""), c.summary
        for key in ("diff", "local_argv"):
            if key in w:
                assert getattr(c, key) == w[key], (c.summary, key)
        if c.script:
            p = subprocess.run(["bash", "-n", "-c", c.script], capture_output=True, text=True)
            assert p.returncode == 0, f"{c.summary}: not valid shell: {p.stderr}"
    if "report" in case:
        assert plain(step.report(values)) == case["report"]
