"""What counts as a run's result file, and where a refused one goes: `fab collect` judges each fetched
file with `check_file` before it may replace the local copy (specfleet.collect.staging), and the report's
scan (specfleet.report.scan.folder) judges every file of a done item with it again.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from ..bastion_io import atomic_write_text
from ..plan.sweep import parse_result_name
from ..worker.layout import RESULT_RE
from .schema import Result, ResultError, incomplete, load_result

QUARANTINE_DIR = "quarantine"
REASON_SUFFIX = ".reason.txt"


@dataclass(frozen=True)
class Expect:
    """What a run must show to count: `num_prompts` asked (None: the file's own), at most
    `max_failed_requests` of them not completed (the plan's benchmark fields)."""

    num_prompts: int | None = None
    max_failed_requests: int = 0
    cell_prompts: dict[str, int] | None = None  # a bench cell that asks another count (sweep.py)

    @classmethod
    def of_plan(cls, plan) -> "Expect":
        """What a specfleet.campaign Plan asks of its runs, per bench cell."""
        b = plan.benchmark
        return cls(b.num_prompts, b.max_failed_requests,
                   {c.name: c.num_prompts for c in b.cells if c.num_prompts != b.num_prompts} or None)

    def asked(self, file_name: str) -> int | None:
        parsed = parse_result_name(file_name)
        return (self.cell_prompts or {}).get(parsed[1] if parsed else "", self.num_prompts)


def parse_name(name: str) -> tuple[str, int, int | None] | None:
    """(config, concurrency, repeat or None) from `<config>_<cell>[_r<K>].json`, else None
    (the cell name: parse_result_name)."""
    m = RESULT_RE.match(name)
    return (m["config"], int(m["conc"]), int(m["rep"]) if m["rep"] is not None else None) if m else None


def check_file(path: Path, expect: Expect | None = None, host: str | None = None) -> Result:
    """Load and judge one result file of `host`'s folder: schema, name and folder vs content,
    completeness. Raises ResultError."""
    res = load_result(path)
    parsed = parse_name(path.name)
    if parsed and res.max_concurrency is not None and res.max_concurrency != parsed[1]:
        raise ResultError(path, f"max_concurrency is {res.max_concurrency} but the file name says conc{parsed[1]}")
    # the runner writes node and config into the result it names and places: a file that says another
    # is a copy, and merged it would be counted as what it did not measure (another node's run passing
    # the equivalence gate against itself)
    meta = res.metadata()
    if parsed and meta.get("config", parsed[0]) != parsed[0]:
        raise ResultError(path, f"its metadata says configuration '{meta['config']}', its name '{parsed[0]}': "
                                "a copy of another configuration's result")
    if host is not None and meta.get("node", host) != host:
        raise ResultError(path, f"its metadata says node '{meta['node']}', its folder '{host}': "
                                "a copy of another node's result")
    expect = expect or Expect()
    if why := incomplete(res, expect.asked(path.name), expect.max_failed_requests):
        raise ResultError(path, why)
    return res


@dataclass
class Quarantined:
    host: str
    source: Path
    dest: Path
    reason: str

    def message(self) -> str:
        if self.dest == self.source:
            return f"not merged (invalid, left in place) {self.source}: {self.reason}"
        return f"quarantined {self.source} -> {self.dest}: {self.reason}"


def quarantine_file(root: Path, host: str, path: Path, reason: str) -> Quarantined:
    """Move `path` to quarantine/<host>/ (never over an earlier one) with its reason beside it."""
    qdir = root / QUARANTINE_DIR / host
    qdir.mkdir(parents=True, exist_ok=True)
    dest = qdir / path.name
    k = 1
    while dest.exists():
        dest = qdir / f"{path.name}.{k}"
        k += 1
    shutil.move(str(path), str(dest))
    atomic_write_text(dest.with_name(dest.name + REASON_SUFFIX), reason + "\n")
    return Quarantined(host=host, source=path, dest=dest, reason=reason)
