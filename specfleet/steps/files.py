"""Steps for files: whole content, one line, a directory, absence."""
from __future__ import annotations

import base64
import binascii
import difflib
import os
from dataclasses import dataclass

from ..shell import DIFF_VAR, q, receive_file_script
from ..step import Change, Facts, Payload, Step, StepFailed


MAX_DIFF_LINES = 60
DIFF_MAX_BYTES = 64 * 1024  # --diff fetches and shows a file's content only up to this size


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

    def probe(self) -> str:
        p = q(self.path)
        want = q(self.payload.sha256 if self.present else "")
        return (f"if [ -f {p} ]; then sf_ms=$(stat -c '%a %s' -- {p}); echo \"$sf_ms\"; "
                f"sf_h=$(sha256sum < {p} | cut -c1-64); echo \"$sf_h\"; "
                f"if [ \"${{{DIFF_VAR}:-}}\" = 1 ] && [ \"$sf_h\" != {want} ] && [ \"${{sf_ms#* }}\" -le {DIFF_MAX_BYTES} ]; "
                f"then printf CONTENT; base64 -w0 -- {p}; echo; fi; "
                f"elif [ -e {p} ]; then echo NOTFILE; else echo ABSENT; fi")

    def decide(self, facts: Facts) -> list[Change]:
        host = _HostFile.parse(facts.stdout)
        if host.state == "NOTFILE":
            raise StepFailed(f"{self.path} exists but is not a regular file; move it away first")
        if not self.present:
            if host.state == "ABSENT":
                return []
            return [Change(f"remove {self.path}", f"rm -f -- {q(self.path)}", self._diff(host, None))]
        if host.state == "ABSENT" or host.sha256 != self.payload.sha256:
            verb = "create" if host.state == "ABSENT" else "update"
            return [Change(f"{verb} {self.path}",
                           receive_file_script(self.path, self.mode, self.payload.size, self.payload.sha256),
                           self._diff(host, self.payload), payload=self.payload)]
        if host.mode.lstrip("0") != self.mode.lstrip("0"):
            return [Change(f"chmod {self.mode} {self.path}", f"chmod {q(self.mode)} -- {q(self.path)}",
                           f"mode {host.mode} -> {self.mode}")]
        return []

    def _diff(self, host: "_HostFile", new: Payload | None) -> str:
        """A unified diff when both sides are small text files and known; else their checksums."""
        absent = host.state == "ABSENT"
        old_text = None if absent else _text(host.content, host.size)
        new_text = None if new is None else _text(new.head(DIFF_MAX_BYTES), new.size)
        if (absent or old_text is not None) and (new is None or new_text is not None):
            return unified_diff(self.path, old_text, new_text)
        old_big = not absent and (host.size > DIFF_MAX_BYTES or (host.content is not None and old_text is None))
        new_big = new is not None and new_text is None
        # else the host's content was not fetched (no --diff): the checksums say what changes
        label = "binary or large file: " if old_big or new_big else ""
        return f"{label}sha256 {'absent' if absent else host.sha256} -> {'absent' if new is None else new.sha256}"


@dataclass
class _HostFile:
    """What FileContent's probe printed: state, mode, size, sha256 and (under --diff) the content."""

    state: str                      # ABSENT, NOTFILE or FILE
    mode: str = ""
    size: int = 0
    sha256: str = ""
    content: bytes | None = None    # only under --diff, for a small file that differs

    @classmethod
    def parse(cls, stdout: str) -> "_HostFile":
        lines = stdout.split("\n")
        head = lines[0].split()
        if not head or head[0] in ("ABSENT", "NOTFILE"):
            return cls(head[0] if head else "ABSENT")
        size = int(head[1]) if len(head) > 1 and head[1].isdigit() else 0
        content = None
        for ln in lines[2:]:
            if ln.startswith("CONTENT"):
                content = _decode(ln[len("CONTENT"):])
        return cls("FILE", head[0], size, lines[1].strip() if len(lines) > 1 else "", content)


def _text(data: bytes | None, size: int) -> str | None:
    """`data` as text if it is a small text file (UTF-8, no NUL byte), else None."""
    if data is None or size > DIFF_MAX_BYTES or b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def _decode(b64: str) -> bytes | None:
    try:
        return base64.b64decode(b64.strip() or b"")
    except binascii.Error:
        return None


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
