"""Steps for files: whole content, one line, a directory, absence."""
from __future__ import annotations

import base64
import binascii
import difflib

from ..shell import q, write_file_script
from ..step import Change, Facts, Step, StepFailed


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
    """A file with exactly this content and mode (or, with present=False, no such file)."""

    probe_needs_root = True

    def __init__(self, path: str, content: str | bytes = b"", mode: str = "0644", present: bool = True):
        self.path = path
        self.content = content.encode() if isinstance(content, str) else content
        self.mode = mode
        self.present = present
        self.name = f"file {path}" if present else f"absent {path}"

    def probe(self) -> str:
        p = q(self.path)
        return (f"if [ -f {p} ]; then stat -c %a -- {p}; base64 -w0 -- {p}; echo; "
                f"elif [ -e {p} ]; then echo NOTFILE; else echo ABSENT; fi")

    def decide(self, facts: Facts) -> list[Change]:
        lines = facts.stdout.split("\n")
        state = lines[0].strip() if lines else "ABSENT"
        if state == "NOTFILE":
            raise StepFailed(f"{self.path} exists but is not a regular file; move it away first")
        if not self.present:
            if state == "ABSENT":
                return []
            old = _decode(lines[1] if len(lines) > 1 else "")
            return [Change(f"remove {self.path}", f"rm -f -- {q(self.path)}",
                           unified_diff(self.path, old.decode(errors="replace"), None))]
        if state == "ABSENT":
            return [Change(f"create {self.path}", write_file_script(self.path, self.content, self.mode),
                           unified_diff(self.path, None, self.content.decode(errors="replace")))]
        mode, old = state, _decode(lines[1] if len(lines) > 1 else "")
        changes = []
        if old != self.content:
            changes.append(Change(f"update {self.path}", write_file_script(self.path, self.content, self.mode),
                                  unified_diff(self.path, old.decode(errors="replace"),
                                               self.content.decode(errors="replace"))))
        elif mode.lstrip("0") != self.mode.lstrip("0"):
            changes.append(Change(f"chmod {self.mode} {self.path}", f"chmod {q(self.mode)} -- {q(self.path)}",
                                  f"mode {mode} -> {self.mode}"))
        return changes


def _decode(b64: str) -> bytes:
    try:
        return base64.b64decode(b64.strip() or b"")
    except binascii.Error:
        return b""


class LineInFile(Step):
    """One exact line present in (or absent from) a file; other lines are left alone."""

    probe_needs_root = True

    def __init__(self, path: str, line: str, present: bool = True, mode: str = "0644"):
        if "\n" in line:
            raise ValueError("LineInFile takes a single line")
        self.path, self.line, self.present, self.mode = path, line, present, mode
        self.name = f"line in {path}: {line}" if present else f"no line in {path}: {line}"

    def probe(self) -> str:
        p = q(self.path)
        return (f"if [ ! -e {p} ]; then echo ABSENT; "
                f"elif grep -qxF -- {q(self.line)} {p}; then echo PRESENT; else echo MISSING; fi; "
                f"[ -s {p} ] && [ \"$(tail -c1 -- {p} | od -An -tx1 | tr -d ' ')\" != 0a ] && echo NOEOL; true")

    def decide(self, facts: Facts) -> list[Change]:
        state = facts.lines[0] if facts.lines else "ABSENT"
        p, line = q(self.path), q(self.line)
        if self.present:
            if state == "PRESENT":
                return []
            sep = "echo >> " + p + " && " if "NOEOL" in facts.lines else ""
            create = f"mkdir -p -- $(dirname -- {p}) && touch -- {p} && chmod {q(self.mode)} -- {p} && " \
                if state == "ABSENT" else ""
            return [Change(f"add line {self.line!r} to {self.path}",
                           f"{create}{sep}printf '%s\\n' {line} >> {p}", f"+{self.line}")]
        if state != "PRESENT":
            return []
        tmp = q(self.path + ".specfleet-tmp")
        return [Change(f"remove line {self.line!r} from {self.path}",
                       f"{{ grep -vxF -- {line} {p} || true; }} > {tmp} && chmod --reference={p} {tmp} "
                       f"&& mv -f -- {tmp} {p}", f"-{self.line}")]


class Directory(Step):
    def __init__(self, path: str, mode: str = "0755"):
        self.path, self.mode = path, mode
        self.name = f"directory {path}"

    def probe(self) -> str:
        p = q(self.path)
        return f"if [ -d {p} ]; then stat -c %a -- {p}; elif [ -e {p} ]; then echo NOTDIR; else echo ABSENT; fi"

    def decide(self, facts: Facts) -> list[Change]:
        state = facts.lines[0] if facts.lines else "ABSENT"
        p = q(self.path)
        if state == "NOTDIR":
            raise StepFailed(f"{self.path} exists and is not a directory")
        if state == "ABSENT":
            return [Change(f"create directory {self.path}", f"mkdir -p -- {p} && chmod {q(self.mode)} -- {p}")]
        if state.lstrip("0") != self.mode.lstrip("0"):
            return [Change(f"chmod {self.mode} {self.path}", f"chmod {q(self.mode)} -- {p}",
                           f"mode {state} -> {self.mode}")]
        return []
