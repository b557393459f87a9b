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

from ..worker.fitcheck import CHAT_BACKEND, applied_template
from ..worker.runspec import ENGINE_FLAGS, PER_REQUEST_FLAG

if TYPE_CHECKING:
    from . import Plan

DATA = Path(__file__).with_name("vllm_releases.json")
_RELEASE = re.compile(r"(\d+\.\d+\.\d+)")
# benchmark.spec_decode_metrics: per_request renders PER_REQUEST_FLAG for every speculative configuration
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
    # the bench backends whose prompts the client leaves untemplated (CHAT_TEMPLATE_BACKENDS, 0.34 on)
    client_template_skipped_for: frozenset[str] = frozenset()

    def chat_template(self, backend: str) -> str:
        """double / single: how often the prompts `vllm bench serve` sends are chat-templated with
        `backend` (spec_bench, speed_bench and custom alike): the client templates unless this release
        skips it for the backend, and a chat backend's server templates the message again."""
        if backend != CHAT_BACKEND:
            return "single"
        return "single" if backend in self.client_template_skipped_for else "double"


@lru_cache(maxsize=1)
def releases() -> dict[str, Release]:
    """Version -> Release, oldest first, as the data file lists them."""
    doc = json.loads(DATA.read_text())
    return {v: Release(v, frozenset(r["serve_flags"]), frozenset(r["bench_flags"]), frozenset(r["datasets"]),
                       frozenset(r["speculative"]["keys"]), frozenset(r["speculative"]["methods"]),
                       frozenset(r["result"]["keys"]), frozenset(r.get("client_template_skipped_for", [])))
            for v, r in doc["releases"].items()}


def release_of(version: str | None) -> Release | None:
    """The matrix's release for a version string as a plan or a venv gives it ("0.32.0+cpu" -> 0.32.0),
    None when the matrix does not hold it (a simulated engine, an unread release)."""
    m = _RELEASE.match((version or "").strip())
    return releases().get(m.group(1)) if m else None


@lru_cache(maxsize=1)   # asked per configuration per release by plan_problems: the matrix is read once
def known_methods() -> frozenset[str]:
    """Every speculative method of any release in the matrix."""
    return frozenset().union(*(r.methods for r in releases().values()))


@lru_cache(maxsize=1)   # asked per configuration per release by plan_problems: the matrix is read once
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


def _engine_flags(part) -> list[tuple[str, str]]:
    """(field, its vLLM flag) of each typed engine field a plan's server or configuration sets: the
    flags they render to (runspec.Serve.engine_args) are checked as the args' are."""
    return [(name, flag) for name, flag in ENGINE_FLAGS.items() if getattr(part, name, None) is not None]


def plan_problems(plan: Plan, rel: Release) -> dict[str | None, list[str]]:
    """Configuration (None: the whole plan) -> each thing of the plan `rel` lacks, one line each,
    naming the plan's field, the value and the release. Keys and methods the matrix does not know
    at all (the plan's opt-in) are not this release's problem: they are reported as not checked."""
    out: dict[str | None, list[str]] = {}
    b = plan.benchmark
    if b.dataset_name not in rel.datasets:
        out.setdefault(None, []).append(f"{_where(plan, None, 'benchmark.dataset_name')}: {b.dataset_name}: "
                                        + _lacks(rel, "such dataset"))
    line = template_problem(plan, rel)
    if line:
        out.setdefault(None, []).append(line)
    for w in plan.server.args:
        f = _flag(w)
        if f and not _flag_known(f, rel.serve_flags):
            out.setdefault(None, []).append(f"{_where(plan, None, 'server.args')}: {f}: "
                                            + _lacks(rel, "such vllm serve flag"))
    for name, f in _engine_flags(plan.server):
        if not _flag_known(f, rel.serve_flags):
            out.setdefault(None, []).append(f"{_where(plan, None, f'server.{name}')}: {f}: "
                                            + _lacks(rel, "such vllm serve flag"))
    for c in plan.configurations:
        lines = out.setdefault(c.name, [])
        for w in c.extra_args:
            f = _flag(w)
            if f and not _flag_known(f, rel.serve_flags):
                lines.append(f"{_where(plan, c.name, 'extra_args')}: {f}: " + _lacks(rel, "such vllm serve flag"))
        for name, f in _engine_flags(c):
            if not _flag_known(f, rel.serve_flags):
                lines.append(f"{_where(plan, c.name, name)}: {f}: " + _lacks(rel, "such vllm serve flag"))
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


def template_problem(plan: Plan, rel: Release | None) -> str | None:
    """The one line refusing the plan's `benchmark.chat_template` under `rel` (None: the plan pins no
    release the matrix holds): the release decides whether its client templates (docs/campaign.md §3)."""
    b = plan.benchmark
    where = f"{_where(plan, None, 'benchmark.chat_template')}: {b.chat_template}"
    if rel is None:
        if b.chat_template == "single" and b.backend == CHAT_BACKEND:
            skip = [v for v, r in releases().items() if r.chat_template(b.backend) == "single"]
            return (f"{where}: with backend {b.backend} the prompts are templated once only where the vLLM "
                    f"release's bench client skips the template ({', '.join(skip) or 'no release of the matrix'}: "
                    "docs/vllm-releases.md); pin vllm_version to such a release, or use backend openai on "
                    "/v1/completions")
        return None
    want = rel.chat_template(b.backend)
    if want == b.chat_template:
        return None
    how = {"client+server": "twice, on the client and again on the server", "server": "once, on the server "
           "(its bench client skips the template)", "client": "once, on the client"}[applied_template(want, b.backend)]
    return (f"{where}: vLLM {rel.version} chat-templates the prompts of backend {b.backend} {how} (read from its "
            f"wheel, docs/vllm-releases.md): write chat_template: {want}, or pin another release")


def refusals(plan: Plan, config: str) -> dict[str, str]:
    """Release -> the one line that refuses `config` under it (the first problem), for every release
    in the matrix that refuses it: the worker looks up the version its venv reports."""
    # asked once per queue item (1,542 at 256 nodes), each answer covering every configuration: the
    # problems are computed once per plan, again when its list of configurations is replaced or grows
    cached = plan._release_problems
    if cached is None or cached[0] is not plan.configurations or cached[1] != len(plan.configurations):
        cached = (plan.configurations, len(plan.configurations),
                  {v: plan_problems(plan, rel) for v, rel in releases().items()})
        plan._release_problems = cached
    out = {}
    for v, p in cached[2].items():
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
                   "not hold: its flags, speculative keys, methods, dataset and chat template were not checked against it")
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
            "plan's flags, speculative keys, methods, dataset and chat template were not checked against it"
            for v in sorted(set(versions)) if v and release_of(v) is None]
