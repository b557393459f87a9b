"""Read the runnable examples of a handbook page (docs/troubleshooting.md).

A section is a `## ` heading. Its marker comment `<!-- doctest: KEY=VALUE ... -->` says what the
testbed needs (`skip`, `needs=provision`, `fault=w1:KIND,w2:KIND`, `hold-gpu=w1:MIB`). Its
```console blocks hold commands: `$ CMD` runs on the bastion, `w1$ CMD` on worker w1; the lines
under a command are excerpts that must appear in its output (`...` is ignored); a trailing
`# exits N` gives the expected exit code (default 0).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

MARKER = re.compile(r"<!--\s*doctest:(.*?)-->", re.S)
BLOCK = re.compile(r"^```console[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
PROMPT = re.compile(r"^(?:(?P<host>[A-Za-z0-9_.-]+))?\$ (?P<cmd>.*)$")
EXITS = re.compile(r"\s+#\s*exits\s+(\d+)\b.*$")


@dataclass
class Command:
    where: str | None  # None = the bastion, else a worker's name
    cmd: str
    exit_code: int = 0
    expect: list[str] = field(default_factory=list)


@dataclass
class Section:
    title: str
    options: dict[str, str]
    commands: list[Command]

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-")

    @property
    def skip(self) -> bool:
        return "skip" in self.options


def sections(path: Path) -> list[Section]:
    out = []
    for chunk in re.split(r"^## ", path.read_text(), flags=re.M)[1:]:
        title, _, body = chunk.partition("\n")
        m = MARKER.search(body)
        options: dict[str, str] = {}
        for word in (m.group(1).split() if m else ["skip"]):
            k, _, v = word.partition("=")
            options[k] = v
        cmds: list[Command] = []
        for block in BLOCK.findall(body):
            for line in block.splitlines():
                p = PROMPT.match(line)
                if p:
                    cmd, code = p.group("cmd"), 0
                    e = EXITS.search(cmd)
                    if e:
                        cmd, code = cmd[:e.start()], int(e.group(1))
                    cmds.append(Command(p.group("host"), cmd.strip(), code))
                elif line.strip() and line.strip() != "...":
                    if not cmds:
                        raise ValueError(f"{path}: section {title!r}: output line before any command: {line!r}")
                    cmds[-1].expect.append(line.strip())
        out.append(Section(title.strip(), options, cmds))
    return out


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)
