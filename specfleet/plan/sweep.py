"""Plans that sweep: server dimensions expand a configuration, bench dimensions give bench cells.

A configuration's `sweep:` (speculative_config keys, `vllm serve` flags) turns it into several, each
one queue item with its own server start; `benchmark.sweep:` (output_len, category, num_prompts, beside
`benchmark.concurrencies`) gives the bench cells every configuration runs on its one server.
A cell's name is `conc<N>` followed by each swept dimension in the order out, cat, n; a plan without
bench sweeps keeps today's `conc<N>` names, so its result files (`<config>_conc<N>[_r<K>].json`) are
unchanged. Names are a function of the cell's own values only: adding a value to a sweep adds cells
and never renames the others.

docs/campaign.md "Plans that sweep" is the reference. Stdlib only (the results side parses names).
"""
from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass
from typing import Any

from ..worker.layout import CELL_PART, RESULT_RE

BENCH_DIMS = ("concurrency", "output_len", "category", "num_prompts")
SWEPT_BENCH_DIMS = BENCH_DIMS[1:]  # concurrency is always named
# a category goes into file names: no '-' (the separator) and no trailing _r<K> (the repeat suffix)
CATEGORY_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,40}\Z")
CELL_RE = re.compile(rf"^{CELL_PART}\Z")  # layout.RESULT_RE holds it in result file names
# short, readable parts of expanded configuration names; other keys appear as themselves
SERVER_ALIASES = {"num_speculative_tokens": "k", "prompt_lookup_min": "pmin", "prompt_lookup_max": "pmax",
                  "draft_tensor_parallel_size": "dtp"}
_UNSAFE = re.compile(r"[^A-Za-z0-9.]+")


class SweepError(ValueError):
    """A bad sweep: the message starts with the field (`sweep.num_speculative_tokens: ...`)."""


@dataclass(frozen=True)
class Cell:
    """One bench run's setup on a server: what `vllm bench serve` is asked to measure."""

    concurrency: int
    output_len: int
    num_prompts: int
    category: str | None = None
    name: str = ""
    request_rate: float | None = None   # requests/s of an open-loop cell (arrivals.py); None = closed loop

    @property
    def prompts_per_concurrency(self) -> float:
        return self.num_prompts / self.concurrency


def cell_name(conc: int, dims: dict[str, Any], named: tuple[str, ...]) -> str:
    parts = [f"conc{conc}"]
    if "output_len" in named:
        parts.append(f"out{dims['output_len']}")
    if "category" in named and dims.get("category"):
        parts.append(f"cat_{dims['category']}")
    if "num_prompts" in named:
        parts.append(f"n{dims['num_prompts']}")
    return "-".join(parts)


def parse_cell(name: str) -> dict[str, Any] | None:
    """{concurrency, output_len, category, num_prompts} (None where the name does not say) or None."""
    m = CELL_RE.match(name)
    if not m:
        return None
    return {"concurrency": int(m["conc"]), "output_len": int(m["out"]) if m["out"] else None,
            "category": m["cat"], "num_prompts": int(m["n"]) if m["n"] else None,
            "request_rate": float(m["rate"]) if m["rate"] else None}


def parse_result_name(name: str) -> tuple[str, str, int, int | None] | None:
    """(config, cell, concurrency, repeat or None) from `<config>_<cell>[_r<K>].json`, else None."""
    m = RESULT_RE.match(name)
    if not m:
        return None
    return m["config"], m["cell"], int(m["conc"]), int(m["rep"]) if m["rep"] is not None else None


def _pos_int(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise SweepError(f"{where}: must be a positive integer, not {v!r}")
    return v


def _check_value(dim: str, v: Any, where: str) -> Any:
    if dim == "category":
        if not isinstance(v, str) or not CATEGORY_RE.match(v) or re.search(r"_r\d+$", v):
            raise SweepError(f"{where}: {v!r} is not a category name (letters, digits, '_'; it names files)")
        return v
    return _pos_int(v, where)


def _lists(mapping: dict, where: str) -> dict[str, list]:
    out = {}
    for k, vals in mapping.items():
        if not isinstance(vals, list) or not vals:
            raise SweepError(f"{where}.{k}: must be a non-empty list of values (a product sweeps every combination)")
        if len({repr(v) for v in vals}) != len(vals):
            raise SweepError(f"{where}.{k}: lists the same value twice")
        out[str(k)] = vals
    return out


def bench_cells(concurrencies: list[int], output_len: int, num_prompts: int, sweep: Any) -> list[Cell]:
    """The bench cells, in plan order: every concurrency x the sweep's product, or its listed points.

    A point without `concurrency` runs at every one of `concurrencies`. Raises SweepError.
    """
    base = {"output_len": output_len, "category": None, "num_prompts": num_prompts}
    points: list[tuple[int, dict]] = []
    if sweep is None or sweep == {}:
        points = [(c, dict(base)) for c in concurrencies]
        named: tuple[str, ...] = ()
    elif isinstance(sweep, dict):
        lists = _lists(sweep, "benchmark.sweep")
        if "concurrency" in lists:
            raise SweepError("benchmark.sweep.concurrency: concurrency is swept by benchmark.concurrencies "
                             "(or set per listed point)")
        for k in lists:
            if k not in SWEPT_BENCH_DIMS:
                raise SweepError(f"benchmark.sweep.{k}: not a bench dimension (known: {', '.join(SWEPT_BENCH_DIMS)})")
        keys = list(lists)
        for k in keys:
            lists[k] = [_check_value(k, v, f"benchmark.sweep.{k}") for v in lists[k]]
        for c in concurrencies:
            for combo in itertools.product(*(lists[k] for k in keys)):
                points.append((c, {**base, **dict(zip(keys, combo))}))
        named = tuple(k for k in SWEPT_BENCH_DIMS if k in lists)
    elif isinstance(sweep, list) and sweep:
        seen_keys: set[str] = set()
        for i, p in enumerate(sweep):
            where = f"benchmark.sweep.{i}"
            if not isinstance(p, dict) or not p:
                raise SweepError(f"{where}: a listed point is a mapping of bench dimensions, not {p!r}")
            for k in p:
                if k not in BENCH_DIMS:
                    raise SweepError(f"{where}.{k}: not a bench dimension (known: {', '.join(BENCH_DIMS)})")
            dims = {**base, **{k: _check_value(k, v, f"{where}.{k}") for k, v in p.items() if k != "concurrency"}}
            concs = [_pos_int(p["concurrency"], f"{where}.concurrency")] if "concurrency" in p else concurrencies
            points += [(c, dims) for c in concs]
            seen_keys |= set(p)
        named = tuple(k for k in SWEPT_BENCH_DIMS if k in seen_keys)
    else:
        raise SweepError("benchmark.sweep: must be a mapping of dimension -> list of values (a product) "
                         "or a non-empty list of points")
    cells, names = [], set()
    for conc, dims in points:
        cell = Cell(conc, dims["output_len"], dims["num_prompts"], dims["category"],
                    cell_name(conc, dims, named))
        if cell.name in names:
            raise SweepError(f"benchmark.sweep: the cell {cell.name} appears twice")
        names.add(cell.name)
        cells.append(cell)
    return cells


def _part(key: str, value: Any) -> str:
    label = SERVER_ALIASES.get(key, key.lstrip("-"))
    if value is True:
        return label
    if value is False:
        return f"no-{label}"
    text = str(value).rstrip("/").rsplit("/", 1)[-1] if isinstance(value, str) else str(value)
    return f"{label}{_UNSAFE.sub('_', text).strip('_')}"


def _apply(entry: dict, point: dict, where: str, spec_keys: set[str]) -> dict:
    """The configuration `entry` with the point's values set (speculative_config keys, server flags)."""
    out = copy.deepcopy(entry)
    out.pop("sweep", None)
    for key, value in point.items():
        if key == "name":
            continue
        if key.startswith("-"):
            if value is None or isinstance(value, (dict, list)):
                raise SweepError(f"{where}.{key}: a server flag's value is a string, number or true/false")
            args = list(out.get("extra_args") or [])
            if isinstance(args, str):
                raise SweepError(f"{where}: extra_args must be a list when the configuration sweeps a server flag")
            out["extra_args"] = args + ([] if value is False else [key] if value is True else [key, str(value)])
        elif key in spec_keys:
            if not isinstance(out.get("speculative_config"), dict):
                raise SweepError(f"{where}.{key}: the configuration has no speculative_config to set it in")
            out["speculative_config"][key] = value
        else:
            raise SweepError(f"{where}.{key}: neither a speculative_config key nor a server flag "
                             "(flags start with --, e.g. --max-num-seqs)")
    return out


def expand_configurations(raw: dict, spec_keys: set[str]) -> tuple[dict, dict[str, dict]]:
    """The raw plan with every swept configuration replaced by its expansion, and for each
    expanded name {"from": the swept configuration's name, "point": its values}.

    Raises SweepError("configurations.<i>.sweep...: ...") for the first problem.
    """
    confs = raw.get("configurations")
    if not isinstance(confs, list) or not any(isinstance(c, dict) and "sweep" in c for c in confs):
        return raw, {}
    out, origin = [], {}
    for i, entry in enumerate(confs):
        if not isinstance(entry, dict) or "sweep" not in entry:
            out.append(entry)
            continue
        name, sweep = entry.get("name"), entry["sweep"]
        where = f"configurations.{i}.sweep"
        if not isinstance(name, str) or not name:
            raise SweepError(f"configurations.{i}.name: a swept configuration needs a name (its expansions are named after it)")
        if name == raw.get("baseline"):
            raise SweepError(f"{where}: the baseline runs on every node as the reference; sweep another "
                             "configuration (one with the same settings under another name)")
        allowed = spec_keys | set(entry.get("speculative_extra_keys") or [])
        if isinstance(sweep, dict) and sweep:
            lists = _lists(sweep, where)
            keys = list(lists)
            points = [dict(zip(keys, combo)) for combo in itertools.product(*(lists[k] for k in keys))]
        elif isinstance(sweep, list) and sweep and all(isinstance(p, dict) and p for p in sweep):
            points, keys = sweep, []
        else:
            raise SweepError(f"{where}: must be a mapping of key -> list of values (a product) or a non-empty "
                             "list of points (mappings)")
        for j, point in enumerate(points):
            pwhere = where if keys else f"{where}.{j}"
            cfg = _apply(entry, point, pwhere, allowed)
            given = point.get("name")
            if given is not None and not isinstance(given, str):
                raise SweepError(f"{pwhere}.name: must be a string, not {given!r}")
            cfg["name"] = given or "-".join([name, *(_part(k, v) for k, v in point.items() if k != "name")])
            origin[cfg["name"]] = {"from": name, "point": {k: v for k, v in point.items() if k != "name"}}
            out.append(cfg)
    return {**raw, "configurations": out}, origin
