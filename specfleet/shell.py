"""Building shell text safely, and the batched probe script.

Everything that reaches a remote shell passes through `q` (specfleet.quoting,
the one quoting layer): a path or value such as "; rm -rf /" stays one word
of data.
"""
from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass

from .quoting import q  # shell.q: the name roles use


def as_root(script: str, *, sudo: bool) -> str:
    """Run `script` as root: through `sudo -n sh -c` for a non-root login, as is otherwise.

    `-n` makes sudo fail at once instead of prompting (a prompt would hang a
    parallel run); the error tells the user to allow passwordless sudo.
    """
    if not sudo:
        return script
    return f"sudo -n -- sh -c {q(script)}"


def receive_file_script(path: str, mode: str, size: int, sha256: str) -> str:
    """Write the command's stdin to `path` atomically, only if it is exactly the payload announced.

    The bytes arrive on stdin (Change.payload), never in the command text, so any size fits.
    They go to a temp file in the same directory (so the rename is atomic), which gets its mode
    and is renamed over `path` only when its size and sha256 match: a connection cut short
    leaves the old file in place and no temp file behind.
    """
    # the format holds only our own digits and hex; the path is an argument (a '%' in it stays data)
    bad = f"specfleet: %s: received %s bytes, expected {int(size)} bytes with sha256 {sha256} (stream cut short?)\n"
    return (
        f"mkdir -p -- {q(_dirname(path))} && "
        f"sf_tmp=$(mktemp -- {q(_dirname(path) + '/.specfleet-XXXXXXXX')}) && "
        f"trap 'rm -f -- \"$sf_tmp\"' EXIT && "
        f"cat > \"$sf_tmp\" && sf_n=$(wc -c < \"$sf_tmp\") && "
        f"{{ [ \"$sf_n\" -eq {int(size)} ] && [ \"$(sha256sum < \"$sf_tmp\" | cut -c1-64)\" = {q(sha256)} ] || "
        f"{{ printf {q(bad)} {q(path)} \"$sf_n\" >&2; exit 1; }}; }} && "
        f"chmod {q(mode)} -- \"$sf_tmp\" && mv -f -- \"$sf_tmp\" {q(path)} && trap - EXIT"
    )


def _dirname(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


def sections_script(commands: list[str]) -> str:
    """One probe of several sections: each command's stdout (stderr dropped) as one base64 line,
    so no file content can ever look like the framing (read back with `read_sections`)."""
    return "\n".join(f"{{ {c}\n}} 2>/dev/null | base64 -w0; echo" for c in commands)


def read_sections(stdout: str, n: int) -> list[str]:
    """The `n` sections of a `sections_script`'s output; "" for one missing or not base64."""
    lines = stdout.split("\n")
    out = []
    for i in range(n):
        try:
            out.append(base64.b64decode(lines[i].strip(), validate=True).decode(errors="replace"))
        except (IndexError, binascii.Error):
            out.append("")
    return out


DIFF_VAR = "SPECFLEET_DIFF"  # set to 1 in a probe batch run under --diff


@dataclass
class ProbeBatch:
    """Several probes in one remote round trip, and the parser for their output.

    Each probe runs in its own subshell with stdin closed; its stdout is
    followed by a marker line carrying a random token, the probe's index and
    its exit code, so probe output can never be mistaken for a marker.
    """

    probes: list[str]
    token: str = ""
    diff: bool = False  # --diff: probes may gather what a diff needs (they test DIFF_VAR)

    def __post_init__(self) -> None:
        self.token = self.token or secrets.token_hex(6)

    def script(self) -> str:
        parts = [f"{DIFF_VAR}=1"] if self.diff else []
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
