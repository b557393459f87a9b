"""Scan a collected folder, results/<campaign>/ as `fab collect` leaves it (`scan_folder` ->
`CollectedFolder`; the layout: docs/report.md, "The result folder"). Not a campaign: that name is the
bastion's placement's (specfleet/campaign/).

Only items of a done config (marker, or the runner's `state.json` says done) are used: a running
item's files are not results yet. A result file of a done config that does not validate is moved to
`quarantine/<host>/` with its reason beside it (`quarantine=False`, as `fab report` scans: nothing
moves, it is only reported); nothing else is moved or deleted. Result data comes from JSON only; what
each run was (configuration, cell, repeat) from its run record (`<stem>.record.json`,
resultfile.check.check_run; a result without one: the legacy converter), never from the file's name;
the server log is read (regex) for KV-cache facts and the vLLM version.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...facts.runner_state import items_problem
from ...worker import layout
from ...worker.record import RunRecord
from ...resultfile.check import (QUARANTINE_DIR, REASON_SUFFIX, Expect, Quarantined, check_run, is_record, named_config,
                                 parse_name, quarantine_file)
from ...resultfile.schema import PROVENANCE_KEYS, Result, ResultError
from ... import untrusted_json

# run.json: the worker's queue as `fab bench` gave it (collect fetches it); provenance.json: read by provenance.py
OTHER_JSON = {layout.STATE, layout.RUN_SPEC, layout.PROVENANCE}
# Directories under the campaign that are not hosts.
NOT_HOSTS = {QUARANTINE_DIR, "plots", "report"}  # and every name starting with "." (collect's staging)

KV_SIZE_RE = re.compile(r"\b(?:(GPU|CPU|XPU|TPU|HPU)\s+)?KV cache size:\s*([\d,]+)\s*tokens")
MAX_CONC_RE = re.compile(r"Maximum concurrency for\s*([\d,]+)\s*tokens per request:\s*([\d,.]+)x")
WEIGHTS_RE = re.compile(r"Model loading took\s*([\d.]+)\s*GiB")
KV_MEM_RE = re.compile(r"Available KV cache memory:\s*([\d.]+)\s*GiB")
LOG_VERSION_RE = re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\)|\bversion\s+(\d+\.\d+\.\d+\S*)")
# vLLM 0.28 writes "GPU KV cache size" on every platform (kv_cache_utils.py, a fixed word; 0.32 names the
# device); its CPU build's worker logs from cpu_worker.py, a file no GPU server runs
CPU_WORKER_RE = re.compile(r"\[cpu_worker\.py:\d+\]")


@dataclass
class Run:
    host: str
    config: str
    conc: int
    repeat: int | None
    path: Path
    result: Result
    cell: str = ""    # the bench cell (sweep.py): conc<N> for a plan without bench sweeps
    record: RunRecord | None = None  # what the run was (its record, or the legacy converter's)

    def __post_init__(self) -> None:
        self.cell = self.cell or f"conc{self.conc}"


@dataclass
class SetAside:
    """A file in quarantine/<host>/ (this collect's or an earlier one's), with its reason."""

    host: str
    path: Path
    reason: str


@dataclass
class KVFacts:
    host: str
    config: str
    log: Path
    device: str | None = None
    kv_tokens: int | None = None
    tokens_per_request: int | None = None
    max_concurrency: float | None = None
    weights_gib: float | None = None
    kv_budget_gib: float | None = None
    vllm_version: str | None = None


@dataclass
class NodeRecord:
    """What the results folder holds about one node: its runner state, done items, provenance
    (not specfleet.campaign.schedule.split.NodeInfo, what the split knows of a node before the run)."""

    host: str
    provenance: dict[str, str] = field(default_factory=dict)
    run_dates: list[str] = field(default_factory=list)
    state: dict[str, Any] | None = None
    done: set[str] = field(default_factory=set)

    def item_status(self, config: str) -> tuple[str, str] | None:
        """(status, error) the runner's state.json records for an item, or None."""
        for i in (self.state or {}).get("items", []) or []:
            if isinstance(i, dict) and i.get("name") == config:
                return str(i.get("status", "")), str(i.get("error") or "")
        return None


@dataclass
class CollectedFolder:
    """What one collected folder holds: its valid runs, what was quarantined or set aside, each node's
    record, the KV facts of its server logs. Whether it is simulated is provenance.simulated_signals'
    (the room's readers import this module; it imports none of them)."""

    root: Path
    runs: list[Run] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)
    kv: list[KVFacts] = field(default_factory=list)
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    pending: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    set_aside: list[SetAside] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def hosts(self) -> list[str]:
        return sorted({r.host for r in self.runs})

    @property
    def configs(self) -> list[str]:
        return sorted({r.config for r in self.runs})

    def groups(self) -> dict[tuple[str, str, str], list[Run]]:
        """(cell, config, host) -> its runs (the repeats of one merged row); a plain plan's cell is conc<N>."""
        out: dict[tuple[str, str, str], list[Run]] = {}
        for r in self.runs:
            out.setdefault((r.cell, r.config, r.host), []).append(r)
        return out


def at_cell(conc: int, cell: str, word: str = "concurrency") -> str:
    """'concurrency 16', and the bench cell where it is not the plain conc<N>."""
    return f"{word} {conc}" + ("" if not cell or cell == f"conc{conc}" else f" (cell {cell})")


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def parse_server_log(path: Path, host: str, config: str) -> KVFacts:
    """KV-cache facts from a vLLM server log (regex on log text)."""
    facts = KVFacts(host=host, config=config, log=path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return facts
    # the runner appends one block per server start: use the last start's lines
    starts = [m.start() for m in re.finditer(r"^==== specfleet ", text, re.M)]
    if starts:
        text = text[starts[-1]:]
    if m := KV_SIZE_RE.search(text):
        facts.device, facts.kv_tokens = m.group(1), int(_num(m.group(2)))
        if facts.device == "GPU" and CPU_WORKER_RE.search(text):
            facts.device = "CPU"
    if m := MAX_CONC_RE.search(text):
        facts.tokens_per_request, facts.max_concurrency = int(_num(m.group(1))), _num(m.group(2))
    if m := WEIGHTS_RE.search(text):
        facts.weights_gib = float(m.group(1))
    if m := KV_MEM_RE.search(text):
        facts.kv_budget_gib = float(m.group(1))
    if m := LOG_VERSION_RE.search(text):
        facts.vllm_version = m.group(1) or m.group(2)
    return facts


def _done_items(state: Any) -> set[str]:
    """The items the runner's state.json records as done: {"items": [{"name": cfg, "status": "done"}, ...]}."""
    items = state.get("items") if isinstance(state, dict) else None
    return {str(i["name"]) for i in items if isinstance(i, dict) and i.get("name") and i.get("status") == "done"} \
        if isinstance(items, list) else set()


def _state_provenance(state: Any) -> dict[str, str]:
    """The provenance keys the runner's state.json holds at its top level (vllm_version, model_path, ...)."""
    if not isinstance(state, dict):
        return {}
    return {k: str(v) for k in PROVENANCE_KEYS + ("gpu_name", "started_at", "finished_at", "model_path")
            if isinstance(v := state.get(k), (str, int, float))}


def _set_aside(root: Path) -> list[SetAside]:
    out = []
    qroot = root / QUARANTINE_DIR
    for qdir in sorted(p for p in qroot.iterdir() if p.is_dir()) if qroot.is_dir() else []:
        for r in sorted(qdir.glob("*" + REASON_SUFFIX)):
            f = r.with_name(r.name[: -len(REASON_SUFFIX)])
            if f.is_file():
                out.append(SetAside(qdir.name, f, r.read_text(encoding="utf-8", errors="replace").strip()))
    return out


def scan_folder(root: Path | str, quarantine: bool = True, expect: Expect | None = None) -> CollectedFolder:
    """Read every host directory of a collected folder; move invalid files of done items
    to quarantine (unless quarantine=False, then they are only reported)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"campaign directory {root} does not exist")
    camp = CollectedFolder(root=root)
    for hdir in sorted(p for p in root.iterdir()
                       if p.is_dir() and p.name not in NOT_HOSTS and not p.name.startswith(".")):
        host = hdir.name
        node = camp.nodes.setdefault(host, NodeRecord(host=host))
        state = None
        sp = hdir / layout.STATE
        if sp.exists():
            try:
                state = untrusted_json.loads(sp.read_text(encoding="utf-8"))
                node.state = state if isinstance(state, dict) else None
            except (OSError, ValueError) as e:
                camp.warnings.append(f"{sp}: unreadable state file ignored ({e})")
            if node.state is not None and (why := items_problem(node.state)):  # the worker wrote it: its shape too
                camp.warnings.append(f"{sp}: {why}: not read (the done markers decide)")
                state = node.state = None
        node.provenance.update(_state_provenance(state))
        done = {p.name.removesuffix(layout.DONE_SUFFIX) for p in hdir.glob("*" + layout.DONE_SUFFIX)} \
            | _done_items(state)
        if state is None and not done:  # a folder of plain vLLM result files (docs/report.md): all finished
            done = {parsed[0] for f in hdir.glob("*.json") if (parsed := parse_name(f.name))}
        node.done = done

        for log in sorted(hdir.glob("*" + layout.SERVER_LOG_SUFFIX)):
            cfg = log.name.removesuffix(layout.SERVER_LOG_SUFFIX)
            if cfg in done:
                camp.kv.append(parse_server_log(log, host, cfg))

        for path in sorted(hdir.glob("*.json")):
            if path.name in OTHER_JSON or is_record(path.name) or path.name.endswith(layout.ACCEPTANCE_SUFFIX):
                continue  # a record is read with its result; acceptance by render/acceptance_report.py
            cfg = named_config(path)
            if cfg is None:
                camp.warnings.append(f"{path}: not named <config>_conc<N>[-<dims>][_r<K>].json and no run record, "
                                     "ignored")
                continue
            if cfg not in done:
                camp.pending.append(path)
                camp.warnings.append(f"{path}: config '{cfg}' on {host} has no done marker, not merged")
                continue
            try:
                res, rec = check_run(path, expect, host)
                if rec is None:  # named_config read a record that check_run did not: raced; judged next time
                    raise ResultError(path, "its run record disappeared while it was read")
                run = Run(host, rec.configuration, rec.cell.concurrency, rec.repeat, path, res, rec.cell.name, rec)
            except ResultError as e:
                camp.quarantined.append(quarantine_file(root, host, path, e.problem) if quarantine
                                        else Quarantined(host, path, path, e.problem))
                continue
            for k, v in res.metadata().items():
                if k not in ("node", "config"):
                    node.provenance.setdefault(k, v)
            if res.date:
                node.run_dates.append(res.date)
            if res.failed:
                camp.warnings.append(f"{path}: {res.failed} request(s) failed (within the plan's max_failed_requests)")
            camp.runs.append(run)
    for kv in camp.kv:
        if kv.vllm_version:
            camp.nodes[kv.host].provenance.setdefault("vllm_version", kv.vllm_version)
    camp.set_aside = _set_aside(root)
    if not any(n for n in camp.nodes):
        camp.warnings.append(f"{root}: no host directories found")
    return camp
