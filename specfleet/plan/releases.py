"""The vLLM releases specfleet knows, and a plan checked against one of them.

The facts are `vllm_releases.json` beside this module, read by `scripts/vllm-matrix` out of each
release's wheel (docs/vllm-releases.md shows them): its `vllm serve` and `vllm bench serve` flags,
SpeculativeConfig keys and methods, datasets and result keys. They are the one list of known
speculative methods and keys: a method or key no release has is allowed only with the plan's opt-in
(`speculative_extra_methods`, `speculative_extra_keys`), and the report says so.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import Plan

DATA = Path(__file__).with_name("vllm_releases.json")
_RELEASE = re.compile(r"(\d+\.\d+\.\d+)")
# benchmark.spec_decode_metrics: per_request renders this flag for every speculative configuration
PER_REQUEST_FLAG = "--per-request-spec-decode-metrics"
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


@dataclass(frozen=True)
class Release:
    version: str
    serve_flags: frozenset[str]
    bench_flags: frozenset[str]
    datasets: frozenset[str]
    speculative_keys: frozenset[str]
    methods: frozenset[str]
    result_keys: frozenset[str]


@lru_cache(maxsize=1)
def releases() -> dict[str, Release]:
    """Version -> Release, oldest first, as the data file lists them."""
    doc = json.loads(DATA.read_text())
    return {v: Release(v, frozenset(r["serve_flags"]), frozenset(r["bench_flags"]), frozenset(r["datasets"]),
                       frozenset(r["speculative"]["keys"]), frozenset(r["speculative"]["methods"]),
                       frozenset(r["result"]["keys"]))
            for v, r in doc["releases"].items()}


def release_of(version: str | None) -> Release | None:
    """The matrix's release for a version string as a plan or a venv gives it ("0.32.0+cpu" -> 0.32.0),
    None when the matrix does not hold it (a simulated engine, an unread release)."""
    m = _RELEASE.match((version or "").strip())
    return releases().get(m.group(1)) if m else None


def known_methods() -> frozenset[str]:
    """Every speculative method of any release in the matrix."""
    return frozenset().union(*(r.methods for r in releases().values()))


def known_speculative_keys() -> frozenset[str]:
    """Every SpeculativeConfig key of any release in the matrix."""
    return frozenset().union(*(r.speculative_keys for r in releases().values()))


def _where(plan: Plan, config: str | None, field: str) -> str:
    return f"{plan.file}: {'' if config is None else f'configuration {config!r}, '}field {field!r}"


def _lacks(rel: Release, what: str) -> str:
    return f"vLLM {rel.version} has no {what} (docs/vllm-releases.md, read from its wheel)"


def _flag(word: str) -> str | None:
    """The flag a command-line word names (`--max_model_len=8` -> --max-model-len), None for a value."""
    if not word.startswith("-") or _NUMBER.fullmatch(word):
        return None
    name = word.split("=", 1)[0]
    if name.startswith("-O"):  # vLLM's parser turns -O3, -O 3, -O=3 into --optimization-level (argparse_utils)
        return "--optimization-level"
    if name.startswith("--"):  # vLLM accepts --a_b for --a-b, and --config.key for a sub-key
        return "--" + name[2:].split(".", 1)[0].replace("_", "-")
    return name


def _flag_known(flag: str, flags: frozenset[str]) -> bool:
    # a short flag may carry its value: -O3 is -O 3
    return flag in flags or (not flag.startswith("--") and any(flag.startswith(f) for f in flags
                                                               if not f.startswith("--")))


def plan_problems(plan: Plan, rel: Release) -> dict[str | None, list[str]]:
    """Configuration (None: the whole plan) -> each thing of the plan `rel` lacks, one line each,
    naming the plan's field, the value and the release. Keys and methods the matrix does not know
    at all (the plan's opt-in) are not this release's problem: they are reported as not checked."""
    out: dict[str | None, list[str]] = {}
    b = plan.benchmark
    if b.dataset_name not in rel.datasets:
        out.setdefault(None, []).append(f"{_where(plan, None, 'benchmark.dataset_name')}: {b.dataset_name}: "
                                        + _lacks(rel, "such dataset"))
    for w in plan.server.args:
        f = _flag(w)
        if f and not _flag_known(f, rel.serve_flags):
            out.setdefault(None, []).append(f"{_where(plan, None, 'server.args')}: {f}: "
                                            + _lacks(rel, "such vllm serve flag"))
    for c in plan.configurations:
        lines = out.setdefault(c.name, [])
        for w in c.extra_args:
            f = _flag(w)
            if f and not _flag_known(f, rel.serve_flags):
                lines.append(f"{_where(plan, c.name, 'extra_args')}: {f}: " + _lacks(rel, "such vllm serve flag"))
        sc = c.speculative_config or {}
        if sc and b.spec_decode_metrics == "per_request" and PER_REQUEST_FLAG not in rel.serve_flags:
            lines.append(f"{_where(plan, c.name, 'benchmark.spec_decode_metrics')}: per_request: "
                         + _lacks(rel, f"{PER_REQUEST_FLAG} (per-request acceptance came in vLLM 0.29)"))
        m = sc.get("method")
        if m in known_methods() and m not in rel.methods:
            lines.append(f"{_where(plan, c.name, 'speculative_config.method')}: {m}: "
                         + _lacks(rel, "such speculative method"))
        for k in sorted(set(sc) & known_speculative_keys() - rel.speculative_keys):
            lines.append(f"{_where(plan, c.name, f'speculative_config.{k}')}: {k}: "
                         + _lacks(rel, "such speculative-config key"))
    return {k: v for k, v in out.items() if v}


def refusals(plan: Plan, config: str) -> dict[str, str]:
    """Release -> the one line that refuses `config` under it (the first problem), for every release
    in the matrix that refuses it: the worker looks up the version its venv reports."""
    out = {}
    for v, rel in releases().items():
        p = plan_problems(plan, rel)
        lines = p.get(None, []) + p.get(plan.config(config).name, [])
        if lines:
            out[v] = lines[0]
    return out


def not_checked(plan: Plan) -> list[str]:
    """What of the plan was not checked against a release, one line each for the report's notes: a
    pinned release the matrix does not hold, and what no release in the matrix has (the plan's opt-in)."""
    out = []
    if plan.vllm_version and release_of(plan.vllm_version) is None:
        out.append(f"the plan pins vLLM {plan.vllm_version}, which the release matrix (docs/vllm-releases.md) does "
                   "not hold: its flags, speculative keys, methods and dataset were not checked against it")
    for c in plan.configurations:
        sc = c.speculative_config or {}
        if sc.get("method") in set(c.speculative_extra_methods) - known_methods():
            out.append(f"configuration {c.name!r}: speculative method {sc['method']!r} is in no vLLM release of "
                       "the matrix (opted in by speculative_extra_methods): not checked against the release")
        keys = sorted(set(sc) & set(c.speculative_extra_keys) - known_speculative_keys())
        if keys:
            out.append(f"configuration {c.name!r}: speculative-config key(s) {', '.join(keys)} in no vLLM release "
                       "of the matrix (opted in by speculative_extra_keys): not checked against the release")
    return out


def unchecked_releases(versions) -> list[str]:
    """One line per vLLM version the results ran that the matrix does not hold (real engines only:
    the caller leaves out the simulated): nothing the plan uses was checked against it."""
    return [f"the results ran vLLM {v}, which the release matrix (docs/vllm-releases.md) does not hold: the "
            "plan's flags, speculative keys, methods and dataset were not checked against it"
            for v in sorted(set(versions)) if v and release_of(v) is None]
