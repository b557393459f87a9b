"""The legacy path: a result written without a run record (a runner before record_version 1, a plain
`vllm bench serve` file) converted to a RunRecord, once, here. Nothing else decodes a result's name
or its `--metadata` strings into what the run was.

What it reads: the file name (`<config>_<cell>[_r<K>].json`, layout.RESULT_RE via
plan.sweep.parse_result_name) for configuration, cell and repeat; the metadata pairs the runner wrote
(node, campaign, plan_hash, repeats, repeat_isolation, engine_identity, gpu_uuids / gpu_names,
packing, prompts_dropped_ids / prompts_selected, sampling_params, generation_config, decoding).
What no older result says is None. One rule is older than the field it fills: results from before
`repeat_isolation` ran every repeat of a cell on one server start, so a repeated run without it is
`cache-reset` (report/tables/measures.REPEAT_MEANING).
"""
from __future__ import annotations

from ..plan.sweep import parse_cell, parse_result_name
from ..untrusted_json import loads
from ..worker.record import RunCell, RunRecord
from .schema import Result

LEGACY_ISOLATION = "cache-reset"  # a repeat of a result older than repeat_isolation: one server start


def _json(raw, kind: type):
    """A metadata string holding JSON of `kind` (a worker's text: a nesting bomb is refused), else None."""
    try:
        v = loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return v if isinstance(v, kind) else None


def _int(raw) -> int | None:
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return None


def engine_identity(raw) -> dict | None:
    """The engine the worker observed (metadata `engine_identity`: name, version, simulated), or None."""
    ident = _json(raw, dict)
    return ident if ident is not None and "simulated" in ident and ident.get("version") else None


def legacy_record(name: str, res: Result, host: str | None) -> RunRecord | None:
    """The record of a result without one, from its name and metadata; None: the name says no run."""
    parsed = parse_result_name(name)
    if parsed is None:
        return None
    config, cell, conc, rep = parsed
    dims, ex = parse_cell(cell) or {}, res.extra
    meta = {k: str(v) for k, v in ex.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)}
    uuids, names = meta.get("gpu_uuids", ""), meta.get("gpu_names", "").split(",")
    gpus = [{"uuid": u, "name": names[i] if i < len(names) else None}
            for i, u in enumerate(uuids.split(",")) if u] or None
    dropped = [i for i in map(_int, meta.get("prompts_dropped_ids", "").split(",")) if i is not None]
    return RunRecord(
        node=meta.get("node", host or ""), configuration=config, result_file=name,
        cell=RunCell(cell, conc, dims.get("output_len"), dims.get("category"), dims.get("request_rate"),
                     dims.get("num_prompts")),
        repeat=rep, repeats=_int(meta.get("repeats")),
        isolation=meta.get("repeat_isolation") or (LEGACY_ISOLATION if rep is not None else None),
        campaign=meta.get("campaign"), plan_hash=meta.get("plan_hash"),
        engine=engine_identity(meta.get("engine_identity")), gpus=gpus,
        packing=meta.get("packing"), prompts_sent=res.num_prompts, prompts_dropped=dropped or None,
        prompts_selected=_int(meta.get("prompts_selected")), sampling_sent=_json(meta.get("sampling_params"), dict),
        server_sampling=_json(meta.get("generation_config"), dict), decoding=meta.get("decoding"))
