"""Gathering the facts of a host's pending steps: one remote round trip, then the bastion's.

Used by the fleet (over SSH) and by the tests (the same batch script run by the local
bash), so both read facts the same way.
"""
from __future__ import annotations

from typing import Any, Callable

from ..shell import ProbeBatch
from ..step import Step, Values
from .base import Fact

#: runs the batch script on the host, as root when asked; returns its stdout
RunBatch = Callable[[str, bool], str]


def host_facts(steps: list[Step]) -> dict[Fact, bool]:
    """The distinct host facts the steps need, each with whether it is gathered as root."""
    out: dict[Fact, bool] = {}
    for s in steps:
        for f in s.facts().values():
            if f.where == "host":
                out[f] = out.get(f, False) or f.needs_root or s.probe_needs_root
    return out


def gather(steps: list[Step], run: RunBatch, *, diff: bool = False, token: str = "") -> list[Values | Exception]:
    """Each step's values (name -> typed value), or the exception that stops that step alone.

    Host facts travel in one batch (no round trip when there are none); a fact asked for by
    several steps is gathered and parsed once. Bastion facts follow, each computed once.
    `token`: the batch's marker token (default: a new random one); the same token renders the same
    script, so output the batch gave earlier can be read back (Slurm's site check, slurm/site_check.py).
    """
    wanted = host_facts(steps)
    known: dict[Fact, Any] = {}
    if wanted:
        groups = _probe_groups(list(wanted), diff)
        batch = ProbeBatch([g[0].command() if len(g) == 1 else type(g[0]).merged_command(g) for g in groups],
                           diff=diff, token=token)
        stdout = run(batch.script(), any(wanted.values()))
        for group, (out, rc) in zip(groups, batch.parse(stdout)):
            known.update(zip(group, _parsed(group, out, rc)))
    results: list[Values | Exception] = []
    for s in steps:
        try:
            values = _values(s.facts(), known)
            values.update(_values(s.bastion_facts(values), known))
            results.append(values)
        except Exception as e:  # this step fails (the fleet says how); the others go on
            results.append(e)
    return results


def _probe_groups(facts: list[Fact], diff: bool) -> list[list[Fact]]:
    """One probe per fact, except the facts of a class that reads several in one command
    (`merged_command`/`split_merged`, e.g. FileState: one stat and one sha256sum for all the files):
    those share one probe. Not under --diff, where each fact may also fetch a content of its own."""
    groups: dict[Any, list[Fact]] = {}
    for f in facts:
        key = type(f) if not diff and hasattr(type(f), "merged_command") else f
        groups.setdefault(key, []).append(f)
    return list(groups.values())


def _parsed(group: list[Fact], out: str, rc: int) -> list[Any]:
    """Each fact's value (or the exception that stops its steps) from its group's probe output."""
    if len(group) == 1:
        return [_safely(lambda: group[0].parse(out, rc))]
    try:
        outs = type(group[0]).split_merged(group, out, rc)
    except Exception as e:  # the whole group could not be read: each of its steps fails with why
        return [e] * len(group)
    return [_safely(lambda: f.parse(o, r)) for f, (o, r) in zip(group, outs)]


def _safely(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:
        return e


def _values(facts: dict[str, Fact], known: dict[Fact, Any]) -> Values:
    out: Values = {}
    for name, f in facts.items():
        if f not in known:
            if f.where != "bastion":  # a host fact asked for by bastion_facts(): after the round trip
                raise RuntimeError(f"{f!r} is a host fact: name it in facts(), not bastion_facts()")
            known[f] = _safely(f.gather_local)
        value = known[f]
        if isinstance(value, Exception):
            raise value
        out[name] = value
    return out


def gather_here(steps: list[Step], cwd: str | None = None, *, diff: bool = False) -> list[Values | Exception]:
    """`gather` with the batch run by the local bash in `cwd`: the same script a host runs
    (tests and `fab`-free checks of a step against a local directory)."""
    import subprocess

    def run(script: str, root: bool) -> str:
        return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True).stdout
    return gather(steps, run, diff=diff)
