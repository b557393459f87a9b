"""model: which model directory each worker will serve from, and whether it is readable.

Field report §3.5 picked the first candidate with a config.json (local copy
first, then NFS), so a lost local copy fell back to NFS: 10-minute loads
instead of seconds. This role reports which one each worker will use.
"""
from __future__ import annotations

from dataclasses import asdict

from typing import Annotated

from pydantic import Field

from specfleet.fleet import Outcomes
from specfleet.inventory import NEEDED, AbsPath, Host, HostVars
from specfleet.facts.model_files import ModelDirState, ModelFiles
from specfleet.step import Change, Step, StepFailed, Values
from specfleet.steps.sync import RemoteCopy
from specfleet.roles import Context, Role


class ModelDir(Step):
    name = "model directory"
    needs_root = False

    def __init__(self, candidates: list[str]):
        self.candidates = candidates

    def facts(self) -> dict:
        return {f"candidate {i}": ModelDirState(c) for i, c in enumerate(self.candidates)}

    def _found(self, facts: Values) -> list[ModelFiles]:
        return [f for f in (facts[f"candidate {i}"] for i in range(len(self.candidates))) if f is not None]

    def decide(self, facts: Values) -> list[Change]:
        found = self._found(facts)
        if not found:
            raise StepFailed(f"no readable model directory (tried {', '.join(self.candidates)}): "
                             "mount the share (fab provision --only nfs) or stage a copy (fab stage-model)")
        best = found[0]
        if best.weights == 0:
            raise StepFailed(f"{best.path} has config.json but no *.safetensors / *.bin weights")
        if best.unreadable:
            raise StepFailed(f"{best.unreadable} weight file(s) in {best.path} are not readable")
        return []

    def report(self, facts: Values) -> dict:
        found = self._found(facts)
        return {"model": asdict(found[0]) if found else None}


class ModelVars(HostVars):
    # where a worker may find the model: local disk first, the share's path last (stage_steps copies)
    model_candidates: Annotated[list[AbsPath] | None, NEEDED] = Field(default=None, min_length=1)


def candidates(host: Host) -> list[str]:
    return list(ModelVars.of(host).model_candidates)


def stage_steps(host: Host) -> list[Step]:
    """Copy the model from the share (last candidate) to local disk (first candidate)."""
    cands = candidates(host)
    if len(cands) < 2:
        raise StepFailed("model_candidates needs a local path first and the share's path last")
    return [RemoteCopy(cands[-1], cands[0]), ModelDir([cands[0]])]


def report_models(ctx: Context, outcomes: Outcomes) -> None:
    """After the play: which directory each worker serves from."""
    from rich.table import Table
    table = Table(title="model directories", title_justify="left")
    for col in ("host", "serves from", "weights", "size"):
        table.add_column(col)
    for host, o in outcomes.items():
        m = next((r.data["model"] for r in o.results if r.data.get("model")), None)
        if m:
            table.add_row(host, m["path"], str(m["weights"]), f"{m['size_bytes'] / 2**30:.2f} GiB")
    if table.row_count:
        ctx.console.print(table)


ROLE = Role(
    name="model",
    summary="which model directory each worker will serve from (first candidate with a config.json)",
    steps=lambda host, ctx: [ModelDir(candidates(host))],
    vars=ModelVars,
    order=70,
    after=report_models,
)
