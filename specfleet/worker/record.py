"""What one bench run was, as the worker knew it: the run record written beside each result
(`<result stem>.record.json`, layout.record_file). Stdlib only; part of the worker program.

The report reads a run's cell and provenance from it (specfleet.resultfile.check.check_run); the
result file's name is only a name. A field the worker did not know is None, never guessed.
`from_json` refuses a malformed record with the field it stopped at (RecordError.field).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

RECORD_VERSION = 1  # raise when a field changes meaning; a reader refuses a version it does not know


class RecordError(ValueError):
    """A record that cannot be read: `field` names where (e.g. 'cell.concurrency')."""

    def __init__(self, field: str, problem: str):
        self.field, self.problem = field, problem
        super().__init__(f"field '{field}': {problem}")


_NUM = (int, float)
# field -> (accepted types, optional); a dict/list is checked as such, its content is the worker's
_CELL = {"name": (str, False), "concurrency": (int, False), "output_len": (int, True), "category": (str, True),
         "request_rate": (_NUM, True), "num_prompts": (int, True)}
_RECORD = {"record_version": (int, False), "node": (str, False), "configuration": (str, False),
           "result_file": (str, False), "cell": (dict, False), "repeat": (int, True), "repeats": (int, True),
           "isolation": (str, True), "campaign": (str, True), "run_id": (str, True), "plan_hash": (str, True),
           "server_start": (str, True), "engine": (dict, True), "serve_argv": (list, True), "gpus": (list, True),
           "packing": (str, True), "prompts_sent": (int, True), "prompts_dropped": (list, True),
           "prompts_selected": (int, True), "sampling_sent": (dict, True), "server_sampling": (dict, True),
           "decoding": (str, True), "bench_started_at": (str, True), "bench_finished_at": (str, True),
           "telemetry_file": (str, True), "chat_template": (str, True)}


def _checked(d, kinds: dict, where: str) -> dict:
    if not isinstance(d, dict):
        raise RecordError(where or "(top level)", f"expected an object, got {type(d).__name__}")
    for k in sorted(set(d) - set(kinds)):
        raise RecordError(where + k, "unknown field")
    for k, (types, optional) in kinds.items():
        v = d.get(k)
        if v is None and optional:
            continue
        if v is None or isinstance(v, bool) or not isinstance(v, types):
            want = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
            raise RecordError(where + k, f"expected {want}, got {json.dumps(v)[:40]}")
    return d


@dataclass(frozen=True)
class RunCell:
    """The bench cell the run measured (plan/sweep.py): conc<N> for a plan without sweeps."""

    name: str
    concurrency: int
    output_len: int | None = None
    category: str | None = None
    request_rate: float | None = None  # open loop (arrivals.py); None: closed loop at `concurrency`
    num_prompts: int | None = None     # what the plan asked of the cell


@dataclass(frozen=True)
class RunRecord:
    """One bench run: where, what cell, which repeat, which server start and engine, what was sent."""

    node: str
    configuration: str
    result_file: str
    cell: RunCell
    repeat: int | None = None          # None: the cell's only run (a name without _r<K>)
    repeats: int | None = None         # the plan's benchmark.repeat
    isolation: str | None = None       # how a repeat is kept apart: server-start / cache-reset
    campaign: str | None = None
    run_id: str | None = None
    plan_hash: str | None = None
    server_start: str | None = None    # `<run_id>/<item>/<n>`: runs with one id shared one server start
    engine: dict | None = None         # what the worker observed: name, version, simulated
    serve_argv: list[str] | None = None
    gpus: list[dict] | None = None     # index, uuid, name of the GPUs the server saw; None: the node's
    packing: str | None = None
    prompts_sent: int | None = None
    prompts_dropped: list[int] | None = None  # question ids dropped as too long for the context
    prompts_selected: int | None = None
    sampling_sent: dict | None = None  # what the client sent (temperature, as on its command line)
    server_sampling: dict | None = None  # the server's defaults for the rest (generation_config)
    decoding: str | None = None
    bench_started_at: str | None = None  # the telemetry window: the client's start and end
    bench_finished_at: str | None = None
    telemetry_file: str | None = None
    # where the prompts were chat-templated (fitcheck.applied_template): client+server, server or client
    chat_template: str | None = None
    record_version: int = RECORD_VERSION

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d) -> "RunRecord":
        d = _checked(d, _RECORD, "")
        if d["record_version"] != RECORD_VERSION:
            raise RecordError("record_version", f"{d['record_version']}, this reader knows {RECORD_VERSION}")
        cell = RunCell(**_checked(d["cell"], _CELL, "cell."))
        return cls(**{f.name: d.get(f.name) for f in fields(cls) if f.name != "cell"}, cell=cell)
