"""What counts as a run's result file, and where a refused one goes: `fab collect` judges each fetched
file with `check_file` before it may replace the local copy (specfleet.collect.staging), and the report's
scan (specfleet.report.scan.folder) judges every file of a done item with `check_run` again.

What the run was comes from its record (`<stem>.record.json`, worker/record.RunRecord), read by
`load_record`; a result without one goes through the one legacy converter (legacy.py). The file's
name is only a name.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import untrusted_json
from ..bastion_io import atomic_write_text
from ..worker.layout import RECORD_SUFFIX, RESULT_RE, record_file
from ..worker.record import RecordError, RunRecord
from .legacy import legacy_record
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

    def asked(self, cell: str) -> int | None:
        """The prompts the plan asks of a run of bench cell `cell` (its name, sweep.py)."""
        return (self.cell_prompts or {}).get(cell, self.num_prompts)


def parse_name(name: str) -> tuple[str, int, int | None] | None:
    """(config, concurrency, repeat or None) from `<config>_<cell>[_r<K>].json`, else None
    (the cell name: parse_result_name)."""
    m = RESULT_RE.match(name)
    return (m["config"], int(m["conc"]), int(m["rep"]) if m["rep"] is not None else None) if m else None


def is_record(name: str) -> bool:
    return name.endswith(RECORD_SUFFIX)


def load_record(path: Path) -> RunRecord:
    """A run record, parsed within bounds; ResultError names the file and the field (one line)."""
    try:
        return RunRecord.from_json(untrusted_json.loads(path.read_text(encoding="utf-8")))
    except RecordError as e:
        raise ResultError(path, f"not a run record: {e}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, untrusted_json.UntrustedJSON) as e:
        raise ResultError(path, f"not a run record: not readable JSON ({' '.join(str(e).split())})") from None


def named_config(path: Path) -> str | None:
    """The configuration a result file belongs to before it is judged (is its item done?): its
    record's when readable, else its name's; None: neither names one."""
    rp = path.with_name(record_file(path.name))
    if rp.is_file():
        try:
            return load_record(rp).configuration
        except ResultError:
            pass  # judged, and refused, by check_run
    parsed = parse_name(path.name)
    return parsed[0] if parsed else None


def run_record(path: Path, res: Result, host: str | None = None) -> RunRecord | None:
    """What the run of result `path` was: its record beside it, else the legacy converter's (None: a
    file without record whose name names no run). Raises ResultError for a malformed record or one
    that is not this file's (another node's, configuration's or file's: a copy)."""
    rp = path.with_name(record_file(path.name))
    if rp.is_file():
        try:
            rec = load_record(rp)
        except ResultError as e:
            raise ResultError(path, f"{rp.name}: {e.problem}") from None
        if rec.result_file != path.name:
            raise ResultError(path, f"{rp.name} records the run of '{rec.result_file}': a copy of another run's record")
    else:
        rec = legacy_record(path.name, res, host)
        if rec is None:
            return None
    # the runner writes node and configuration into the record (and the result) it places: a file that
    # says another is a copy, and merged it would be counted as what it did not measure (another node's
    # run passing the equivalence gate against itself)
    said, meta = ("its run record" if rp.is_file() else "the file name"), res.metadata()
    if res.max_concurrency is not None and res.max_concurrency != rec.cell.concurrency:
        raise ResultError(path, f"max_concurrency is {res.max_concurrency} but {said} says conc{rec.cell.concurrency}")
    if meta.get("config", rec.configuration) != rec.configuration:
        raise ResultError(path, f"its metadata says configuration '{meta['config']}', "
                                f"{'its run record' if rp.is_file() else 'its name'} '{rec.configuration}': "
                                "a copy of another configuration's result")
    if host is not None and meta.get("node", host) != host:
        raise ResultError(path, f"its metadata says node '{meta['node']}', its folder '{host}': "
                                "a copy of another node's result")
    if host is not None and rec.node != host:
        raise ResultError(path, f"its run record says node '{rec.node}', its folder '{host}': "
                                "a copy of another node's result")
    return rec


def check_run(path: Path, expect: Expect | None = None, host: str | None = None) -> tuple[Result, RunRecord | None]:
    """Load and judge one result file of `host`'s folder with its run record: schema, record, name and
    folder vs content, completeness. Raises ResultError."""
    res = load_result(path)
    rec = run_record(path, res, host)
    expect = expect or Expect()
    if why := incomplete(res, expect.asked(rec.cell.name if rec else ""), expect.max_failed_requests):
        raise ResultError(path, why)
    return res, rec


def check_file(path: Path, expect: Expect | None = None, host: str | None = None) -> Result:
    """check_run's result alone."""
    return check_run(path, expect, host)[0]


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
