"""Facts about paths on a host: a file's checksum and mode, a line in a file, a directory,
a symlink, a small text file, the subdirectories of a directory.

Inspection never follows a link: a fact that reads a file (or checks a directory) reports a
symlink at its path as `link` with its target ("is a symlink to X"), so neither --diff nor a step
reads through a link planted at a path it manages (a root-only file elsewhere)."""
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import ClassVar

from ..quoting import q
from ..shell import DIFF_VAR, read_sections, sections_script
from .base import Fact, FactError, lines

DIFF_MAX_BYTES = 64 * 1024  # --diff fetches a differing file's content only up to this size


@dataclass(frozen=True)
class HostFile:
    state: str                      # "absent", "notfile", "link" or "file"
    mode: str = ""                  # octal, as stat prints it ("644")
    size: int = 0
    sha256: str = ""
    content: bytes | None = None    # only under --diff, for a small file that differs from the wanted one
    target: str = ""                # a link's target (state "link"), as readlink prints it


@dataclass(frozen=True)
class FileState(Fact):
    """A regular file's mode, size and sha256; under --diff also its content, when it differs
    from `want_sha256` and is at most DIFF_MAX_BYTES."""

    path: str
    want_sha256: str = ""
    needs_root = True

    def command(self) -> str:
        p = q(self.path)
        return (f"if [ -L {p} ]; then echo link; readlink -- {p}; "
                f"elif [ -f {p} ]; then stat -c '%a %s' -- {p}; sf_h=$(sha256sum < {p}); sf_h=${{sf_h%% *}}; echo \"$sf_h\"; "
                f"if [ \"${{{DIFF_VAR}:-}}\" = 1 ] && [ \"$sf_h\" != {q(self.want_sha256)} ] && "
                f"[ \"$(stat -c %s -- {p})\" -le {DIFF_MAX_BYTES} ]; then printf c; base64 -w0 -- {p}; echo; fi; "
                f"elif [ -e {p} ]; then echo notfile; else echo absent; fi")

    @classmethod
    def merged_command(cls, facts: list["FileState"]) -> str:
        """Several files' states in one probe: when every path is a regular file (a no-op run), one
        `stat` and one `sha256sum` for all of them (~5 ms of CPU per file less on a host); else each
        file's own command, its output framed in base64 (sections_script). Not under --diff (gather)."""
        paths = " ".join(q(f.path) for f in facts)
        regular = " && ".join(f"[ ! -L {q(f.path)} ] && [ -f {q(f.path)} ]" for f in facts)
        return (f"if {regular}; then echo all; stat -c '%a %s' -- {paths} && sha256sum -- {paths}\n"
                f"else echo each\n{sections_script([f.command() for f in facts])}\nfi")

    @classmethod
    def split_merged(cls, facts: list["FileState"], stdout: str, rc: int) -> list[tuple[str, int]]:
        """merged_command's output as each fact's own command would have printed it."""
        head, _, rest = stdout.partition("\n")
        if head == "each":
            return [(text, 0) for text in read_sections(rest, len(facts))]
        got, n = rest.split("\n"), len(facts)
        if head != "all" or rc != 0 or len(got) < 2 * n:
            raise FactError(f"cannot read the states of {', '.join(f.path for f in facts)} (one changed while read?)")
        # sha256sum marks a line whose name it escaped with a leading backslash
        return [(f"{got[i]}\n{got[n + i].split(' ', 1)[0].lstrip(chr(92))}\n", 0) for i in range(n)]

    def parse(self, stdout: str, rc: int) -> HostFile:
        if stdout.startswith("link\n"):
            return HostFile("link", target=_link_target(stdout))
        out = stdout.split("\n")
        head = out[0].split()
        if not head or head[0] in ("absent", "notfile"):
            return HostFile(head[0] if head else "absent")
        if len(head) != 2 or not head[1].isdigit() or len(out) < 2:
            raise FactError(f"cannot read the state of {self.path} ({out[0][:80]!r})")
        content = None
        if len(out) > 2 and out[2].startswith("c"):  # the content, base64 after a "c"
            try:
                content = base64.b64decode(out[2][1:].strip())
            except binascii.Error:
                content = None
        return HostFile("file", head[0], int(head[1]), out[1].strip(), content)


def _link_target(stdout: str) -> str:
    """The target after a "link" line (any bytes but the trailing newline readlink adds)."""
    return stdout.partition("\n")[2].removesuffix("\n")


@dataclass(frozen=True)
class LineState:
    exists: bool
    present: bool = False
    ends_with_newline: bool = True
    link: str | None = None  # the path is a symlink to this (never read through)


@dataclass(frozen=True)
class LineInFileState(Fact):
    """Whether the file exists, holds exactly this line, and ends with a newline."""

    path: str
    line: str
    needs_root = True

    def command(self) -> str:
        p = q(self.path)
        return (f"if [ -L {p} ]; then echo link; readlink -- {p}; exit 0; fi; "
                f"if [ ! -e {p} ]; then echo absent; "
                f"elif grep -qxF -- {q(self.line)} {p}; then echo present; else echo missing; fi; "
                f"[ -s {p} ] && [ \"$(tail -c1 -- {p}; echo .)\" != {q(chr(10) + '.')} ] && echo noeol; true")

    def parse(self, stdout: str, rc: int) -> LineState:
        if stdout.startswith("link\n"):
            return LineState(True, link=_link_target(stdout))
        got = lines(stdout)
        state = got[0] if got else "absent"
        return LineState(state != "absent", state == "present", "noeol" not in got)


@dataclass(frozen=True)
class PathMode:
    kind: str        # "dir", "link", "other" (exists, not a directory) or "absent"
    mode: str = ""   # octal, for a directory
    target: str = ""  # a link's target


@dataclass(frozen=True)
class DirectoryState(Fact):
    path: str

    def command(self) -> str:
        p = q(self.path)
        return (f"if [ -L {p} ]; then echo link; readlink -- {p}; elif [ -d {p} ]; then stat -c %a -- {p}; "
                f"elif [ -e {p} ]; then echo other; else echo absent; fi")

    def parse(self, stdout: str, rc: int) -> PathMode:
        if stdout.startswith("link\n"):
            return PathMode("link", target=_link_target(stdout))
        got = (lines(stdout) or ["absent"])[0]
        return PathMode("dir", got) if got.isdigit() else PathMode(got if got == "other" else "absent")


@dataclass(frozen=True)
class PathKind:
    kind: str                  # "link", "dir", "other" or "absent"
    target: str | None = None  # a link's target, as readlink prints it


@dataclass(frozen=True)
class Link(Fact):
    """What `path` is; for a symlink, its target (any bytes but a trailing newline)."""

    path: str

    def command(self) -> str:
        p = q(self.path)
        return (f"if [ -L {p} ]; then echo link; readlink -- {p}; elif [ -d {p} ]; then echo dir; "
                f"elif [ -e {p} ]; then echo other; else echo absent; fi")

    def parse(self, stdout: str, rc: int) -> PathKind:
        kind = stdout.partition("\n")[0]
        if kind == "link":
            return PathKind("link", _link_target(stdout))
        return PathKind(kind if kind in ("dir", "other") else "absent")


@dataclass(frozen=True)
class FileText(Fact):
    """A small text file's content without its trailing newlines; None when it cannot be read.
    A symlink is not read: FactError "is a symlink to X"."""

    path: str
    LINK_RC: ClassVar[int] = 90

    def command(self) -> str:
        p = q(self.path)
        return f"if [ -L {p} ]; then readlink -- {p}; exit {self.LINK_RC}; fi; cat -- {p}"

    def parse(self, stdout: str, rc: int) -> str | None:
        if rc == self.LINK_RC:
            target = stdout.removesuffix("\n")
            raise FactError(f"{self.path} is a symlink to {target!r}; not read through (replace it by a file)")
        return stdout.rstrip("\n") if rc == 0 else None


@dataclass(frozen=True)
class SubDirs(Fact):
    """The names of the directories directly under `path` (NUL-separated on the wire: any name)."""

    path: str

    def command(self) -> str:
        return f"find {q(self.path)} -mindepth 1 -maxdepth 1 -type d -printf '%f\\0' 2>/dev/null; true"

    def parse(self, stdout: str, rc: int) -> list[str]:
        return sorted(n for n in stdout.split("\0") if n.strip("\n"))
