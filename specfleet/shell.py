"""Building shell text safely, and the batched probe script.

Everything that reaches a remote shell passes through `q` (specfleet.quoting,
the one quoting layer): a path or value such as "; rm -rf /" stays one word
of data.
"""
from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass

from .quoting import join, q  # noqa: F401  (re-exported: shell.q is the name roles use)


def as_root(script: str, *, sudo: bool) -> str:
    """Run `script` as root: through `sudo -n sh -c` for a non-root login, as is otherwise.

    `-n` makes sudo fail at once instead of prompting (a prompt would hang a
    parallel run); the error tells the user to allow passwordless sudo.
    """
    if not sudo:
        return script
    return f"sudo -n -- sh -c {q(script)}"


def write_file_script(path: str, content: bytes, mode: str = "0644") -> str:
    """Write `content` to `path` atomically (temp file + rename) in one command."""
    b64 = base64.b64encode(content).decode()
    tmp = f"{path}.specfleet-tmp"
    return (
        f"mkdir -p -- {q(_dirname(path))} && "
        f"printf %s {q(b64)} | base64 -d > {q(tmp)} && "
        f"chmod {q(mode)} -- {q(tmp)} && mv -f -- {q(tmp)} {q(path)}"
    )


def _dirname(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


@dataclass
class ProbeBatch:
    """Several probes in one remote round trip, and the parser for their output.

    Each probe runs in its own subshell with stdin closed; its stdout is
    followed by a marker line carrying a random token, the probe's index and
    its exit code, so probe output can never be mistaken for a marker.
    """

    probes: list[str]
    token: str = ""

    def __post_init__(self) -> None:
        self.token = self.token or secrets.token_hex(6)

    def script(self) -> str:
        parts = []
        for i, probe in enumerate(self.probes):
            parts.append(
                f"( {probe}\n) </dev/null 2>/dev/null; printf '\\n@@SF-{self.token}:{i}:%d@@\\n' $?"
            )
        return "\n".join(parts)

    def parse(self, stdout: str) -> list[tuple[str, int]]:
        """[(stdout, exit code)] per probe, in order."""
        out: list[tuple[str, int]] = [("", -1)] * len(self.probes)
        buf: list[str] = []
        prefix = f"@@SF-{self.token}:"
        for line in stdout.split("\n"):
            if line.startswith(prefix) and line.endswith("@@"):
                idx, rc = line[len(prefix):-2].split(":")
                text = "\n".join(buf)
                # the marker's printf began with a newline of its own
                out[int(idx)] = (text, int(rc))
                buf = []
            else:
                buf.append(line)
        return out
