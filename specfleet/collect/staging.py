"""Collect's second half on the bastion: files fetched into `.staging/<host>/` replace the local copies
only when they are valid, so a collect never destroys a result (docs/report.md, "What is merged").

A staged result file that validates (resultfile.check.check_file) replaces the local one atomically (same file
system: os.replace); one that does not is moved to quarantine and the local copy, valid or absent,
stays. Other files (state.json, run.json, done markers, server logs) replace theirs as they are.
SSH-free: `fetch.py` fetches, this decides.
"""
from __future__ import annotations

import glob
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..resultfile.check import (QUARANTINE_DIR, REASON_SUFFIX, Expect, check_file, is_record, load_record, parse_name,
                                quarantine_file)
from ..resultfile.schema import ResultError
from ..bastion_io import atomic_write_text
from ..worker.layout import record_file
from .untrusted import SAFE_NAME_RE, Limits, staged_refusal

STAGING_DIR = ".staging"


def staging_dir(campaign_dir: Path, host: str) -> Path:
    """This process's staging folder for `host`: two `fab collect` at once each have their own."""
    return Path(campaign_dir) / STAGING_DIR / f"{host}.{os.getpid()}"


def _left_by_a_dead_collect(d: Path, host: str) -> bool:
    """A staging folder of `host` whose collect is gone (crashed, killed): its leftovers may go."""
    if d.name == host:  # the name before each collect had its own
        return True
    pid = d.name[len(host) + 1:]
    if not pid.isdigit():  # another host's (w1.example for w1)
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return int(pid) == os.getpid()


def quarantine_dir(campaign_dir: Path, host: str) -> Path:
    return Path(campaign_dir) / QUARANTINE_DIR / host


def fresh_staging(campaign_dir: Path, host: str) -> Path:
    """An empty staging folder for `host` (a crashed collect's leftovers go; a live one's stay)."""
    d = staging_dir(campaign_dir, host)
    for old in (Path(campaign_dir) / STAGING_DIR).glob(f"{glob.escape(host)}*"):
        if old.is_dir() and _left_by_a_dead_collect(old, host):
            shutil.rmtree(old, ignore_errors=True)
    for _ in range(5):  # another host's collect may remove an empty .staging/ between the two mkdirs
        try:
            d.mkdir(parents=True)
            return d
        except FileNotFoundError:
            continue
    d.mkdir(parents=True)
    return d


@dataclass
class Accepted:
    host: str
    replaced: list[str] = field(default_factory=list)     # names now in the host folder
    refused: list[str] = field(default_factory=list)      # one message per invalid fetched file

    def summary(self) -> str:
        parts = []
        if self.replaced:
            parts.append(f"fetched {len(self.replaced)} file(s): {', '.join(sorted(self.replaced))}")
        if self.refused:
            parts.append(f"{len(self.refused)} invalid file(s) quarantined: " + "; ".join(self.refused))
        return "; ".join(parts)


def accept(campaign_dir: Path, host: str, expect: Expect | None = None, limits: Limits | None = None) -> Accepted:
    """Move what was staged for `host` into place, result files only when valid; empty the staging.

    Every staged entry is judged by lstat first (untrusted.staged_refusal): a link, a device or an
    oversized file is never read, only recorded in quarantine with the rule it broke."""
    campaign_dir = Path(campaign_dir)
    stage = staging_dir(campaign_dir, host)
    local = campaign_dir / host
    local.mkdir(parents=True, exist_ok=True)
    out = Accepted(host)
    limits = limits or Limits.default()
    for f in sorted(stage.iterdir()) if stage.is_dir() else []:
        dest = local / f.name
        if not os.path.lexists(f):  # the record of a refused result, removed with it
            continue
        if why := staged_refusal(f, limits):
            out.refused += refuse_unfetched(campaign_dir, host, [(f.name, why)])
            _remove(f)
            continue
        rec = f.with_name(record_file(f.name))
        if not is_record(f.name) and not rec.exists() and (local / rec.name).is_file():
            shutil.copy2(local / rec.name, rec)  # unchanged, so not fetched (--compare-dest): judged with its result
        if parse_name(f.name) or is_record(f.name) or rec.is_file():
            try:  # a record is judged alone here, and with its result (staged beside it) by check_file
                load_record(f) if is_record(f.name) else check_file(f, expect, host)
            except ResultError as e:
                out.refused.append(_refuse(campaign_dir, host, f, dest, e.problem, expect))
                if not is_record(f.name) and rec.is_file():
                    _quarantine_record(campaign_dir, host, rec)
                continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(f, dest)
        out.replaced.append(f.name)
    if stage.is_dir():
        shutil.rmtree(stage)
    return out


def refuse_unfetched(campaign_dir: Path, host: str, bad: list[tuple[str, str]]) -> list[str]:
    """Record entries refused by a rule (untrusted.refusal) in quarantine/<host>/<name>.reason.txt,
    without their content (it was never fetched, or is removed unread); one message each."""
    msgs = []
    qdir = quarantine_dir(campaign_dir, host)
    for name, why in bad:
        qdir.mkdir(parents=True, exist_ok=True)
        safe = SAFE_NAME_RE.match(name)
        reason = qdir / ((name if safe else "_" + name.encode("unicode_escape").decode().replace("/", "_"))
                         + REASON_SUFFIX)
        atomic_write_text(reason, f"not taken from {host}: {why}\n")
        kept = ("the copy collected earlier is kept" if safe and (Path(campaign_dir) / host / name).is_file()
                else "nothing of it was taken")
        msgs.append(f"{host}:{name if safe else repr(name)} on the worker is refused ({why}): recorded in {reason}; "
                    f"{kept}")
    return msgs


def _quarantine_record(campaign_dir: Path, host: str, rec: Path) -> None:
    """A refused result's record goes to quarantine beside it, never into place (the local result keeps
    its own): there the next collect's --compare-dest finds it unchanged and does not fetch it again,
    which it did on every collect when the record was only removed."""
    qdir = quarantine_dir(campaign_dir, host)
    qdir.mkdir(parents=True, exist_ok=True)
    os.replace(rec, qdir / rec.name)  # the record of the result quarantined now replaces an older one


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def _refuse(campaign_dir: Path, host: str, staged: Path, dest: Path, problem: str, expect: Expect | None) -> str:
    if dest.is_file():
        try:
            load_record(dest) if is_record(dest.name) else check_file(dest, expect, host)
            kept = "the valid copy collected earlier is kept and merged"
        except ResultError:
            kept = "the copy collected earlier is not valid either"
    else:
        kept = "there is no earlier copy"
    q = quarantine_file(campaign_dir, host, staged, f"fetched from {host}: {problem}")
    return (f"{host}:{dest.name} on the worker is invalid ({problem}): quarantined as {q.dest}; {kept}; "
            "`fab bench` measures it again")
