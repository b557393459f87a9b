"""Facts from fixture files: command output in, typed value out (as pyinfra's tests/facts).

Each tests/facts/<module>.<Fact>/<case>.json holds:
  "args"     the fact's arguments (its dataclass fields), default {}
  "output"   what the command printed on the host, "rc" its exit code (default 0)
  "value"    the parsed value, as JSON (dataclasses as objects, None as null)
  "error"    instead of "value": a substring of the FactError the parser raises
  "command"  optional: the exact shell text the fact runs (hostile arguments come out quoted)
Adding a case is adding a file. <module> is under specfleet.facts.
"""
from __future__ import annotations

import importlib
import json
import subprocess
from pathlib import Path

import pytest

from specfleet.facts.base import Fact, FactError, from_json

HERE = Path(__file__).parent
CASES = sorted(HERE.glob("*/*.json"))


def fact_class(dirname: str) -> type[Fact]:
    module, _, name = dirname.rpartition(".")
    return getattr(importlib.import_module(f"specfleet.facts.{module}"), name)


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_fact_fixture(path):
    case = json.loads(path.read_text())
    cls = fact_class(path.parent.name)
    fact = cls(**case.get("args", {}))
    if "command" in case:
        assert fact.command() == case["command"]
    p = subprocess.run(["bash", "-n", "-c", fact.command()], capture_output=True, text=True)
    assert p.returncode == 0, f"the fact's command is not valid shell: {p.stderr}"
    if "error" in case:
        with pytest.raises(FactError) as e:
            fact.parse(case["output"], case.get("rc", 0))
        assert case["error"] in str(e.value)
        return
    got = fact.parse(case["output"], case.get("rc", 0))
    assert got == from_json(cls.value_type(), case["value"])


def test_every_fact_has_a_fixture():
    """A new fact comes with at least one case."""
    import specfleet.facts as pkg
    covered = {p.parent.name for p in CASES}
    missing = []
    for mod_path in sorted(Path(pkg.__file__).parent.glob("*.py")):
        mod = importlib.import_module(f"specfleet.facts.{mod_path.stem}")
        for name, obj in vars(mod).items():
            if (isinstance(obj, type) and issubclass(obj, Fact) and obj is not Fact and obj.__module__ == mod.__name__
                    and f"{mod_path.stem}.{name}" not in covered):
                missing.append(f"{mod_path.stem}.{name}")
    assert not missing, f"facts without a fixture under tests/facts/: {missing}"
