"""The bastion's own storage faults while collecting or reporting: a full disk, a read-only or
unwritable results folder. Each is one line and its own exit code, never a crash; the results already
there stay as they were, because every file specfleet writes under results/ is written whole or not
at all (a temp file beside it, then os.replace) and rsync only writes into the staging folder.
"""
from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from .exits import EXIT_DISK_FULL, EXIT_NOT_WRITABLE
from .step import StepFailed

FULL = {errno.ENOSPC: "No space left on device", errno.EDQUOT: "Disk quota exceeded"}
NOT_WRITABLE = {errno.EROFS: "Read-only file system", errno.EACCES: "Permission denied",
                errno.EPERM: "Operation not permitted"}
# rsync's receiver on the bastion says these (e.g. `write failed on "...": No space left on device (28)`)
RSYNC_FULL = tuple(f"{t} ({n})" for n, t in FULL.items())
RSYNC_NOT_WRITABLE = ("Read-only file system (30)",)


class BastionStorageError(StepFailed):
    """The results folder cannot take what collect or report writes; `code` is the exit code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def advice(code: int, folder: Path) -> str:
    if code == EXIT_DISK_FULL:
        return (f"free space on the file system of {folder} (df -h {folder}) and run it again; the results "
                "collected earlier are intact and the workers keep theirs, nothing needs measuring again")
    return (f"make {folder} writable (mount it read-write, or pass --results a writable folder) and run it "
            "again; the results collected earlier are intact and the workers keep theirs")


def of_oserror(e: OSError, folder: Path) -> BastionStorageError | None:
    """The storage fault `e` is (None: another OSError, which stays what it is)."""
    if e.errno in FULL:
        code, what = EXIT_DISK_FULL, f"the bastion's disk is full ({FULL[e.errno]})"
    elif e.errno in NOT_WRITABLE:
        code, what = EXIT_NOT_WRITABLE, f"the results folder cannot be written ({NOT_WRITABLE[e.errno]})"
    else:
        return None
    where = f" writing {e.filename}" if e.filename else ""
    return BastionStorageError(f"{folder}: {what}{where}: {advice(code, folder)}", code)


def of_rsync(stderr: str, folder: Path) -> BastionStorageError | None:
    """The storage fault a failed rsync's stderr names on the receiving (bastion) side, if any."""
    if any(s in stderr for s in RSYNC_FULL):
        return BastionStorageError(f"{folder}: the bastion's disk is full (rsync: No space left on device): "
                                   f"{advice(EXIT_DISK_FULL, folder)}", EXIT_DISK_FULL)
    if any(s in stderr for s in RSYNC_NOT_WRITABLE):
        return BastionStorageError(f"{folder}: the results folder cannot be written (rsync: Read-only file "
                                   f"system): {advice(EXIT_NOT_WRITABLE, folder)}", EXIT_NOT_WRITABLE)
    return None


def storage_checked(fn, folder: Path | None = None):
    """`fn()`, with a storage fault of the results folder (an OSError of_oserror knows, or a
    BastionStorageError) turned into invoke's Exit: `error: <one line>` and its exit code."""
    from invoke.exceptions import Exit
    try:
        return fn()
    except BastionStorageError as e:
        raise Exit(f"error: {e}", code=e.code) from None
    except OSError as e:
        if folder is None or (err := of_oserror(e, Path(folder))) is None:
            raise
        raise Exit(f"error: {err}", code=err.code) from None


def check_writable(folder: Path) -> None:
    """Raise BastionStorageError unless `folder` (made if missing) takes a small file: before any host
    is asked for anything, a read-only or full results folder is one line."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".specfleet-write-check-", dir=folder)
        try:
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError as e:
        if (err := of_oserror(e, folder)) is not None:
            raise err from None
        raise


_UMASK = os.umask(0o022)  # read once (os.umask only reads by setting), then put back
os.umask(_UMASK)


def _temp_beside(path: Path) -> tuple[int, Path]:
    """A new temp file in `path`'s folder (so os.replace is atomic) under a name no other process
    uses, with the mode a plain open() would give (mkstemp's 0600 would make report.md private)."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_UMASK)
    return fd, Path(name)


def atomic_write_text(path: Path, text: str) -> None:
    """`path` holds `text` whole, or keeps what it held (a temp file beside it, then os.replace)."""
    path = Path(path)
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class AtomicFiles:
    """Several files written as a set: `tmp(path)` gives where to write each, `commit()` renames them all
    into place; leaving the block without commit (an exception) removes every temp file."""

    def __init__(self):
        self._pending: list[tuple[Path, Path]] = []

    def tmp(self, path: Path) -> Path:
        path = Path(path)
        fd, t = _temp_beside(path)  # a name of its own: two collects or reports at once never share one
        os.close(fd)
        self._pending.append((t, path))
        return t

    def commit(self) -> None:
        for t, path in self._pending:
            os.replace(t, path)
        self._pending = []

    def __enter__(self) -> "AtomicFiles":
        return self

    def __exit__(self, *exc) -> None:
        for t, _ in self._pending:
            t.unlink(missing_ok=True)
