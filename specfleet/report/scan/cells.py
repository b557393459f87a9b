"""Every planned (configuration, concurrency, node) cell and its state: merged, missing or quarantined.

A report that leaves a cell out says so; the report's exit code says whether any cell is not merged.
Which node was given which configuration comes from, in order: `<host>/run.json` (the queue `fab
bench` placed on that worker) when its plan hash is the plan's, `planned.json` (written by `fab
bench` at placement; `fab collect` adds why a host gave nothing), else the result files of a host
folder. docs/report.md, "Planned cells and completeness", says it in full.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ...worker.layout import RUN_SPEC, cell_result_filename
from ...plan.sweep import Cell
from .folder import NOT_HOSTS, CollectedFolder, at_cell, parse_name
from ... import untrusted_json

PLANNED_FILE = "planned.json"
PLACED = "placed by fab bench"   # the source of the queues `fab bench` wrote
SPLIT = "the split over the hosts collected"  # collect's fallback for a campaign without them
MERGED, MISSING, QUARANTINED = "merged", "missing", "quarantined"
NO_NODE = "–"


def running_note(running: dict[str, str], plan_path: str) -> str | None:
    """While a node's runner is still measuring, its missing cells are not to be measured again."""
    if not running:
        return None
    plan = shlex.quote(plan_path)
    who = ", ".join(f"{h} ({w})" for h, w in sorted(running.items()))
    return (f"the bench is still running on {who}: its unfinished cells are not missing; "
            f"`fab collect --plan {plan}` again once it has finished (`fab status --plan {plan}` "
            "shows where it stands); nothing needs measuring again")


@dataclass
class Planned:
    """What the plan asked for and who was to measure it."""

    configs: list[str]
    concurrencies: list[int]
    repeat: int
    baseline: str
    plan_hash: str
    plan_path: str
    queues: dict[str, list[str]] = field(default_factory=dict)   # node -> configs
    sources: dict[str, str] = field(default_factory=dict)        # node -> where its queue came from
    host_notes: dict[str, str] = field(default_factory=dict)     # node -> why it gave nothing (collect)
    cells: list[str] = field(default_factory=list)               # bench cell names (sweep.py); [] = conc<N>
    running: dict[str, str] = field(default_factory=dict)        # node -> its live runner (collect saw it)
    placed: dict[str, list[str]] = field(default_factory=dict)   # the queues fab bench placed (kept as written)
    left_out: dict[str, str] = field(default_factory=dict)       # host fab bench was asked for -> why not placed
    problem: str | None = None                                   # planned.json not read, and why
    fields: dict = field(default_factory=dict)  # the plan as hashed (Plan.canonical_json): what changed since

    def cell_names(self) -> list[tuple[str, int]]:
        """(cell name, its concurrency) in plan order."""
        if self.cells:
            return [(c, int(c[4:].split("-", 1)[0])) for c in self.cells]
        return [(f"conc{c}", c) for c in self.concurrencies]

    @property
    def nodes(self) -> list[str]:
        return sorted(self.queues)

    def running_note(self) -> str | None:
        return running_note(self.running, self.plan_path)

    def left_out_notes(self) -> list[str]:
        """A host fab bench was asked for but placed nothing on has no cell to be missing: said here."""
        return [f"{h} was left out of fab bench at placement ({why}): the other nodes were given its share"
                for h, why in sorted(self.left_out.items())]

    def command(self) -> str:
        """What re-measures every cell that is not merged: the runner redoes only items whose
        result is missing or invalid (same hosts, so the same split)."""
        hosts = f" --hosts {shlex.quote(','.join(self.nodes))}" if self.nodes else ""
        plan = shlex.quote(self.plan_path)
        return f"fab bench --plan {plan}{hosts} && fab collect --plan {plan}"

    def to_json(self) -> str:
        return json.dumps({"plan_hash": self.plan_hash, "queues": self.queues, "sources": self.sources,
                           "host_notes": self.host_notes, **({"placed": self.placed} if self.placed else {}),
                           **({"left_out": self.left_out} if self.left_out else {})},
                          indent=2, sort_keys=True) + "\n"


def placed(plan, queues: dict[str, list[str]], left_out: dict[str, str] | None = None) -> str:
    """planned.json as `fab bench` writes it at placement: the queues it decided, and the hosts it was
    asked for but placed nothing on (unreachable, failed its probe), with why."""
    return json.dumps({"plan_hash": plan.plan_hash(), "queues": queues, "sources": {h: PLACED for h in queues},
                       "host_notes": {}, "placed": queues, **({"left_out": left_out} if left_out else {})},
                      indent=2, sort_keys=True) + "\n"


def write_placed(plan, queues: dict[str, list[str]], campaign_dir: Path,
                 left_out: dict[str, str] | None = None) -> None:
    """planned.json with the queues this placement decided, before any runner starts (fab bench over
    SSH and under Slurm): a full or read-only results disk stops fab bench there, with its exit code."""
    from ...bastion_io import atomic_write_text, storage_checked

    def write() -> None:
        campaign_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(campaign_dir / PLANNED_FILE, placed(plan, queues, left_out))
    storage_checked(write, campaign_dir)


def placed_queues(plan, campaign_dir: Path) -> dict[str, list[str]] | None:
    """The queues `fab bench` placed for this plan (planned.json), or None: placed without one."""
    saved = _read_json(Path(campaign_dir) / PLANNED_FILE) or {}
    queues = saved.get("placed")
    if saved.get("plan_hash") != plan.plan_hash() or not isinstance(queues, dict):
        return None
    return {h: [str(c) for c in q] for h, q in queues.items() if isinstance(q, list)} or None


def placed_missing(plan, campaign_dir: Path) -> str:
    """Why `placed_queues` found none, in words naming the file (collect says it before it falls back on
    the split): an unreadable file is not one that "holds no queues"."""
    path = Path(campaign_dir) / PLANNED_FILE
    try:
        saved = untrusted_json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{path} does not exist (fab bench writes it when it places the queues)"
    except OSError as e:
        return f"{path} cannot be read ({e.strerror or e})"
    except ValueError as e:  # not UTF-8, not JSON, or out of bounds
        return f"{path} is not readable JSON ({str(e)[:120]})"
    if not isinstance(saved, dict):
        return f"{path} is not a JSON object"
    if saved.get("plan_hash") != plan.plan_hash():
        return f"{path} was placed for another version of the plan (plan hash {str(saved.get('plan_hash'))[:16]})"
    return f"{path} holds no queues placed by fab bench for this plan"


def planned_from(plan, plan_path: str, campaign_dir: Path, split_queues: dict[str, list[str]] | None = None,
                 host_notes: dict[str, str] | None = None, running: dict[str, str] | None = None,
                 queues_source: str = SPLIT) -> Planned:
    """The planned cells of `plan` (a specfleet.campaign.Plan) for the results in `campaign_dir`.

    `split_queues` (collect: the queues fab bench placed, else the split over the hosts it was asked
    for; `queues_source` says which) fills in hosts without a run.json; `host_notes` (collect: host ->
    why nothing came from it) are kept.
    """
    campaign_dir = Path(campaign_dir)
    b = plan.benchmark
    p = Planned(configs=[c.name for c in plan.configurations], concurrencies=list(b.concurrencies),
                repeat=b.repeat, baseline=plan.baseline, plan_hash=plan.plan_hash(), plan_path=plan_path,
                cells=[c.name for c in b.cells], fields=json.loads(plan.canonical_json()))
    saved = _read_json(campaign_dir / PLANNED_FILE)
    if saved and (why := _planned_problem(saved)):  # edited by hand: read as absent, said once
        p.problem, saved = f"{campaign_dir / PLANNED_FILE}: {why}: not read", None
    p.placed = placed_queues(plan, campaign_dir) or {}  # kept through collect's rewrites of the file
    if saved and saved.get("plan_hash") == p.plan_hash:  # likewise (its shape checked with the others)
        p.left_out = dict(saved.get("left_out") or {})
    if saved and saved.get("plan_hash") == p.plan_hash and split_queues is None:
        p.queues = {h: list(q) for h, q in (saved.get("queues") or {}).items()}
        p.sources = {h: f"{PLANNED_FILE} ({s})" for h, s in (saved.get("sources") or {}).items()}
        p.host_notes = dict(saved.get("host_notes") or {})
    for h, q in (split_queues or {}).items():
        p.queues[h], p.sources[h] = list(q), queues_source
    p.host_notes.update(host_notes or {})
    p.running = dict(running or {})
    dirs = sorted(d for d in campaign_dir.iterdir() if d.is_dir() and not d.name.startswith(".")
                  and d.name not in NOT_HOSTS) if campaign_dir.is_dir() else []
    for d in dirs:
        spec = _read_json(d / RUN_SPEC)
        if spec and spec.get("plan_hash") == p.plan_hash and isinstance(spec.get("items"), list):
            p.queues[d.name] = [str(i.get("name")) for i in spec["items"] if isinstance(i, dict)]
            p.sources[d.name] = RUN_SPEC
        elif d.name not in p.queues:
            have = {parsed[0] for f in d.glob("*.json") if (parsed := parse_name(f.name))}
            if have:
                p.queues[d.name] = [c for c in p.configs if c == p.baseline or c in have]
                p.sources[d.name] = "the result files there"
    # authoritative queues (run.json) win: a configuration they hold is not also expected elsewhere
    held = {c for h, q in p.queues.items() if p.sources.get(h) == RUN_SPEC for c in q if c != p.baseline}
    for h, q in p.queues.items():
        if p.sources.get(h) != RUN_SPEC:
            p.queues[h] = [c for c in q if c == p.baseline or c not in held]
    return p


def _planned_problem(saved: dict) -> str | None:
    """Why planned.json's queues, sources or host notes are not of the shape to_json writes, or None."""
    for key in ("queues", "sources", "host_notes", "left_out"):
        value = saved.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            return f"field '{key}' is not an object"
        names = key == "queues"   # host -> its configurations; the others: host -> a line
        for h, v in value.items():
            if not (isinstance(v, list) and all(isinstance(c, str) for c in v) if names else isinstance(v, str)):
                return f"field '{key}.{h}' is {json.dumps(v)[:40]}, not {'a list of names' if names else 'a string'}"
    return None


def _read_json(path: Path) -> dict | None:
    try:
        d = untrusted_json.loads(path.read_text(encoding="utf-8"))
        return d if isinstance(d, dict) else None
    except (OSError, ValueError):
        return None


@dataclass
class CellState:
    config: str
    concurrency: int
    node: str
    state: str          # merged | missing | quarantined
    runs: int           # runs merged
    expected: int       # runs planned (benchmark.repeat)
    why: str = ""
    cell: str = ""      # the bench cell's name; conc<N> for a plan without bench sweeps

    def __post_init__(self) -> None:
        self.cell = self.cell or f"conc{self.concurrency}"

    @property
    def merged(self) -> bool:
        return self.state == MERGED

    def label(self) -> str:
        return f"{self.config} @ {at_cell(self.concurrency, self.cell)} on {self.node}"


def _file_names(p: Planned, cfg: str, cell: str) -> list[str]:
    named = Cell(int(cell[4:].split("-", 1)[0]), 0, 0, None, cell)
    return [cell_result_filename(cfg, named, k, p.repeat) for k in range(1, p.repeat + 1)]


def _missing_why(camp: CollectedFolder, p: Planned, node: str, cfg: str, name: str) -> str:
    if node in p.host_notes:
        return p.host_notes[node]
    info = camp.nodes.get(node)
    if info is None:
        return f"no results from {node} in {camp.root}: not measured there yet, or not collected"
    st = info.item_status(cfg)
    if st and st[0] != "done":
        err = st[1].strip().splitlines()[0][:300] if st[1].strip() else ""
        return f"not finished on {node}: the runner's state says {st[0]}" + (f": {err}" if err else "")
    if cfg not in info.done:
        if info.state is not None and st is None:
            return f"{node}'s runner state has no item '{cfg}' (another plan's run?)"
        return f"'{cfg}' has no done marker on {node}: not finished"
    return f"{name}: no such file in {camp.root / node}"


def cell_states(camp: CollectedFolder, p: Planned) -> list[CellState]:
    """One state per planned cell, in plan order (configurations, bench cells, nodes)."""
    merged: dict[tuple[str, str], Path] = {(r.host, r.path.name): r.path for r in camp.runs}
    bad = {(q.host, q.source.name): q for q in camp.quarantined}
    aside = {(a.host, a.path.name.split(".json")[0] + ".json"): a for a in camp.set_aside}
    out = []
    for cfg in p.configs:
        nodes = [n for n in p.nodes if cfg in p.queues[n]]
        for cname, conc in p.cell_names():
            if not nodes:
                out.append(CellState(cfg, conc, NO_NODE, MISSING, 0, p.repeat,
                                     f"no node's queue holds this configuration (no {RUN_SPEC} or {PLANNED_FILE} "
                                     "names it): it was not run", cname))
                continue
            for node in nodes:
                names = _file_names(p, cfg, cname)
                got = [n for n in names if (node, n) in merged]
                cell = CellState(cfg, conc, node, MERGED, len(got), len(names), cell=cname)
                for n in names:
                    if (node, n) in merged:
                        continue
                    rep = f" (repeat {names.index(n) + 1} of {len(names)})" if len(names) > 1 else ""
                    if (node, n) in bad:
                        q = bad[(node, n)]
                        where = "left in place" if q.dest == q.source else f"moved to {q.dest}"
                        cell.state, cell.why = QUARANTINED, f"{n}{rep}: {q.reason} ({where})"
                    elif (node, n) in aside:
                        a = aside[(node, n)]
                        cell.state = QUARANTINED
                        cell.why = f"{n}{rep}: {a.reason} (set aside as {a.path})"
                        if (more := _missing_why(camp, p, node, cfg, n)) and not more.startswith(n):
                            cell.why += f"; {more}"
                    else:
                        cell.state, cell.why = MISSING, f"{n}{rep}: " + _missing_why(camp, p, node, cfg, n)
                    break
                out.append(cell)
    return out
