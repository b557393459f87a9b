"""Steps for files: whole content, one line, a directory, absence."""
from __future__ import annotations

import difflib
import os

from ..facts.files import DIFF_MAX_BYTES, DirectoryState, FileState, HostFile, LineInFileState
from ..shell import q, receive_file_script
from ..step import Change, Payload, Step, StepFailed, Values


MAX_DIFF_LINES = 60


def unified_diff(path: str, old: str | None, new: str | None) -> str:
    """A unified diff, cut after MAX_DIFF_LINES lines (a dataset is not worth reading in a terminal)."""
    a = (old or "").splitlines(keepends=True)
    b = (new or "").splitlines(keepends=True)
    lines = list(difflib.unified_diff(a, b, f"{path} (host)" if old is not None else "/dev/null",
                                      f"{path} (wanted)" if new is not None else "/dev/null"))
    if len(lines) > MAX_DIFF_LINES:
        lines = lines[:MAX_DIFF_LINES] + [f"... {len(lines) - MAX_DIFF_LINES} more diff lines\n"]
    return "".join(lines)


class FileContent(Step):
    """A file with exactly this content and mode (or, with present=False, no such file).

    The content is `content` (text or bytes made on the bastion) or `source` (a bastion file of
    any size, read as it is sent). The host's file is compared by its sha256 and mode, gathered
    in the batched probe; its content comes back only under --diff, and only for a file of at
    most DIFF_MAX_BYTES that differs. The new content travels as the change's payload.
    """

    probe_needs_root = True

    def __init__(self, path: str, content: str | bytes = b"", mode: str = "0644", present: bool = True,
                 *, source: str | os.PathLike | None = None):
        self.path = path
        self.mode = mode
        self.present = present
        if source is not None:
            self.payload = Payload.of_file(source)
        else:
            self.payload = Payload.of_bytes(content.encode() if isinstance(content, str) else content)
        self.name = f"file {path}" if present else f"absent {path}"

    def facts(self) -> dict:
        return {"file": FileState(self.path, self.payload.sha256 if self.present else "")}

    def decide(self, facts: Values) -> list[Change]:
        host = facts["file"]
        if host.state == "notfile":
            raise StepFailed(f"{self.path} exists but is not a regular file; move it away first")
        if host.state == "link":  # never read through; the write (mv over it) replaces the link itself
            said = f"{self.path} is a symlink to {host.target}"
            if not self.present:
                return [Change(f"remove symlink {self.path} (to {host.target})", f"rm -f -- {q(self.path)}", said)]
            new = _text(self.payload.head(DIFF_MAX_BYTES), self.payload.size)
            diff = f"{said}; it is replaced by a file (the link's target is not read or changed)\n" + \
                (unified_diff(self.path, None, new) if new is not None else f"sha256 -> {self.payload.sha256}")
            return [Change(f"replace symlink {self.path} (to {host.target}) by a file",
                           receive_file_script(self.path, self.mode, self.payload.size, self.payload.sha256),
                           diff, payload=self.payload)]
        if not self.present:
            if host.state == "absent":
                return []
            return [Change(f"remove {self.path}", f"rm -f -- {q(self.path)}", self._diff(host, None))]
        if host.state == "absent" or host.sha256 != self.payload.sha256:
            verb = "create" if host.state == "absent" else "update"
            return [Change(f"{verb} {self.path}",
                           receive_file_script(self.path, self.mode, self.payload.size, self.payload.sha256),
                           self._diff(host, self.payload), payload=self.payload)]
        if host.mode.lstrip("0") != self.mode.lstrip("0"):
            return [Change(f"chmod {self.mode} {self.path}", f"chmod {q(self.mode)} -- {q(self.path)}",
                           f"mode {host.mode} -> {self.mode}")]
        return []

    def _diff(self, host: HostFile, new: Payload | None) -> str:
        """A unified diff when both sides are small text files and known; else their checksums."""
        absent = host.state == "absent"
        old_text = None if absent else _text(host.content, host.size)
        new_text = None if new is None else _text(new.head(DIFF_MAX_BYTES), new.size)
        if (absent or old_text is not None) and (new is None or new_text is not None):
            return unified_diff(self.path, old_text, new_text)
        old_big = not absent and (host.size > DIFF_MAX_BYTES or (host.content is not None and old_text is None))
        new_big = new is not None and new_text is None
        # else the host's content was not fetched (no --diff): the checksums say what changes
        label = "binary or large file: " if old_big or new_big else ""
        return f"{label}sha256 {'absent' if absent else host.sha256} -> {'absent' if new is None else new.sha256}"


def _text(data: bytes | None, size: int) -> str | None:
    """`data` as text if it is a small text file (UTF-8, no NUL byte), else None."""
    if data is None or size > DIFF_MAX_BYTES or b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


class LineInFile(Step):
    """One exact line present in (or absent from) a file; other lines are left alone."""

    probe_needs_root = True

    def __init__(self, path: str, line: str, present: bool = True, mode: str = "0644"):
        if "\n" in line:
            raise ValueError("LineInFile takes a single line")
        self.path, self.line, self.present, self.mode = path, line, present, mode
        self.name = f"line in {path}: {line}" if present else f"no line in {path}: {line}"

    def facts(self) -> dict:
        return {"line": LineInFileState(self.path, self.line)}

    def decide(self, facts: Values) -> list[Change]:
        state = facts["line"]
        if state.link is not None:
            raise StepFailed(f"{self.path} is a symlink to {state.link}; specfleet does not edit a file through a "
                             "link (replace the link by the file it should be)")
        p, line = q(self.path), q(self.line)
        if self.present:
            if state.present:
                return []
            sep = "echo >> " + p + " && " if not state.ends_with_newline else ""
            create = f"mkdir -p -- \"$(dirname -- {p})\" && touch -- {p} && chmod {q(self.mode)} -- {p} && " \
                if not state.exists else ""
            return [Change(f"add line {self.line!r} to {self.path}",
                           f"{create}{sep}printf '%s\\n' {line} >> {p}", f"+{self.line}")]
        if not state.present:
            return []
        tmp = q(self.path + ".specfleet-tmp")
        return [Change(f"remove line {self.line!r} from {self.path}",
                       f"{{ grep -vxF -- {line} {p} || true; }} > {tmp} && chmod --reference={p} {tmp} "
                       f"&& mv -f -- {tmp} {p}", f"-{self.line}")]


class Directory(Step):
    def __init__(self, path: str, mode: str = "0755"):
        self.path, self.mode = path, mode
        self.name = f"directory {path}"

    def facts(self) -> dict:
        return {"dir": DirectoryState(self.path)}

    def decide(self, facts: Values) -> list[Change]:
        state = facts["dir"]
        p = q(self.path)
        if state.kind == "link":
            raise StepFailed(f"{self.path} is a symlink to {state.target}, not a directory (not followed)")
        if state.kind == "other":
            raise StepFailed(f"{self.path} exists and is not a directory")
        if state.kind == "absent":
            return [Change(f"create directory {self.path}", f"mkdir -p -- {p} && chmod {q(self.mode)} -- {p}")]
        if state.mode.lstrip("0") != self.mode.lstrip("0"):
            return [Change(f"chmod {self.mode} {self.path}", f"chmod {q(self.mode)} -- {p}",
                           f"mode {state.mode} -> {self.mode}")]
        return []
