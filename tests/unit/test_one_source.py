"""Each default in one place, each name with one meaning (issue 13 point 5), read off the code."""
import ast
from collections import Counter
from pathlib import Path

import yaml

from specfleet.plan import NGRAM_METHODS, Equivalence, parse_plan
from specfleet.plan.releases import known_methods
from specfleet.campaign.schedule.split import METHOD_SPEED
from specfleet.report.gates.gate import DEFAULT_BASELINE, EquivalenceRule

REPO = Path(__file__).resolve().parents[2]
CODE = [p for d in ("specfleet", "tasks", "roles") if (REPO / d).is_dir() for p in sorted((REPO / d).rglob("*.py"))]


def trees():
    for p in CODE:
        yield p, ast.parse(p.read_text(encoding="utf-8"))


def literal_defaults(tree, arg: str):
    """Literal default values given to a parameter or a class field named `arg` (None is "not given",
    which then falls back to the one default, so it is no second default)."""
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = n.args
            pos = a.posonlyargs + a.args
            pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))
            yield from (d.value for p, d in pairs if p.arg == arg and isinstance(d, ast.Constant)
                        and d.value is not None)
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == arg \
                and isinstance(n.value, ast.Constant) and n.value.value is not None:
            yield n.value.value


def test_the_baseline_default_is_named_once():
    found = {str(p.relative_to(REPO)): v for p, t in trees() for v in literal_defaults(t, "baseline")}
    assert found == {}, f"use specfleet.report.gates.gate.DEFAULT_BASELINE: {found}"
    strings = Counter(n.value for _, t in trees() for n in ast.walk(t) if isinstance(n, ast.Constant))
    assert strings[DEFAULT_BASELINE] <= 2  # gate.DEFAULT_BASELINE and split.REPORT_DURATIONS' data


def test_the_equivalence_rule_defaults_are_the_plans():
    """One source: the rule a folder is reported with when no plan says otherwise is the rule a
    plan without `equivalence:` gets."""
    plan_rule = Equivalence()
    rule = EquivalenceRule()
    assert (rule.metric, rule.concurrency, rule.tolerance_pct) == \
        (plan_rule.metric, plan_rule.concurrency, plan_rule.tolerance_pct)
    for field in ("metric", "concurrency", "tolerance_pct"):
        literal = [str(p.relative_to(REPO)) for p, t in trees() for _ in literal_defaults(t, field)
                   if p.relative_to(REPO).as_posix() != "specfleet/plan/__init__.py"]
        assert literal == [], f"{field}: a literal default outside specfleet.plan: {literal}"


def test_a_plan_without_equivalence_gets_the_default_rule():
    raw = yaml.safe_load((REPO / "plans" / "qwen3-32b.yml").read_text())
    raw.pop("equivalence", None)
    assert parse_plan(raw).equivalence == Equivalence()


def test_method_names_are_listed_once():
    assert set(METHOD_SPEED) - {None} <= known_methods()
    assert NGRAM_METHODS <= set(METHOD_SPEED)
    strings = Counter(n.value for _, t in trees() for n in ast.walk(t) if isinstance(n, ast.Constant))
    assert strings["ngram_gpu"] == 1 and strings["mlp_speculator"] == 1, "method names belong in plan.py"


def test_one_name_one_meaning():
    """One NodeInfo (the split's), one render module (specfleet/render.py, the one Jinja environment
    factory), one collect module (the `fab collect` task)."""
    classes = Counter(n.name for _, t in trees() for n in ast.walk(t) if isinstance(n, ast.ClassDef))
    assert classes["NodeInfo"] == 1
    modules = Counter(p.stem for p in CODE if p.stem != "__init__")
    assert modules["render"] == 1 and modules["collect"] == 1, modules
    envs = [str(p.relative_to(REPO)) for p, t in trees() for n in ast.walk(t)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "Environment"]
    assert envs == ["specfleet/render.py"], envs


# pyinfra's convention, kept on purpose: the facts about a subject and the steps that change it share
# the subject's name (facts/files.py reads files, steps/files.py edits them).
MIRRORED = {("specfleet/facts", "specfleet/steps")}


def test_no_two_modules_share_a_basename():
    """One name, one meaning, for modules too: `crossover.py` once meant the worker's search and the
    report's curve, `report.py` the `fab report` task and the report pipeline. A module's basename
    names one thing across specfleet/, roles/ and tasks/ (a fact module and its step module excepted)."""
    where: dict[str, list[str]] = {}
    for p in CODE:
        if p.stem != "__init__" and p.stem != "__main__":
            where.setdefault(p.stem, []).append(str(p.parent.relative_to(REPO)))
    clashes = {stem: dirs for stem, dirs in where.items()
               if len(dirs) > 1 and not (len(dirs) == 2 and tuple(sorted(dirs)) in MIRRORED)}
    assert not clashes, f"rename one of each: {clashes}"
