"""Facts for copying trees: a tree's listing hash (on the host and on the bastion), what
`rsync -n -i` would send from the bastion (a bastion fact), and what a host-local rsync
would copy."""
from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass

from ..quoting import join, q
from .base import Fact, FactError, lines

# A tree's listing (type, path, size, mode, owner, link target, mtime in whole
# seconds), hashed: equal on both sides means rsync's quick check would find
# nothing to do. Computed on the host inside the batched probe, so a no-op run
# needs no OpenSSH handshake at all (~0.3 s per host).
LISTING = "find . -printf '%y %P %s %m %U %G %l %T@\\n' | sed 's/\\.[0-9]*$//' | LC_ALL=C sort"
# The same listing without bytecode caches (any entry in or of a __pycache__ directory): Python
# rewrites a stale .pyc where it runs (a worker's first import after a source changed), and
# checks each one against its source itself. Filtered from the one listing, not a second `find`
# (a venv's 1,700 entries listed once per host and run).
CODE_ONLY = "LC_ALL=C grep -a -Ev '^. (.*/)?__pycache__(/| )'"
# Two lines, `HASH  -` as sha256sum prints them: the tree's hash, then its code's. The listing goes
# through once: tee hands it to the code filter (fd 3) and to the tree's hash, which writes straight to
# the probe's output (fd 4) while the code's hash is held back, so the tree's line always comes first
# (a listing held in a shell variable and printed twice cost ~15 ms more per host and run).
LISTINGS = (f"{{ sf_c=$( {{ {LISTING} | tee /dev/fd/3 | sha256sum >&4; }} 3>&1 | {CODE_ONLY} | sha256sum ); "
            f"printf '%s\\n' \"$sf_c\"; }} 4>&1")


@dataclass(frozen=True)
class Listing:
    tree: str  # every entry (what rsync -a would compare)
    code: str  # without bytecode caches


@dataclass(frozen=True)
class TreeListing(Fact):
    """The listing hashes of the tree at `path` on the host (None when there is no such directory)."""

    path: str

    def command(self) -> str:
        return f"cd {q(self.path)} 2>/dev/null || exit 3; {LISTINGS}"

    def parse(self, stdout: str, rc: int) -> Listing | None:
        got = [ln.split()[0] for ln in lines(stdout)]
        return Listing(got[0], got[1]) if rc == 0 and len(got) == 2 else None


_local_listings: dict[tuple, str] = {}
_listing_lock = threading.Lock()


@dataclass(frozen=True)
class LocalListing(TreeListing):
    """The same hash of a bastion tree; computed once per tree version and run."""

    where = "bastion"

    def gather_local(self) -> Listing | None:
        # "/opt/vllm-venv" (the release id) and "/opt/vllm-venv/" (the rsync source) are one listing
        key = (self.path.rstrip("/") or "/", os.stat(self.path).st_mtime_ns)
        with _listing_lock:
            if key not in _local_listings:
                p = subprocess.run(["bash", "-c", self.command()], capture_output=True, text=True, check=True)
                _local_listings[key] = self.parse(p.stdout, p.returncode)
            return _local_listings[key]


@dataclass(frozen=True)
class RsyncItemize(Fact):
    """What `rsync -n -i` run on the bastion (over OpenSSH) would change on `host`: one line per
    item, the top directory's timestamp-only line left out."""

    argv: tuple[str, ...]  # the dry-run rsync command line
    host: str              # for the message
    where = "bastion"

    def command(self) -> str:
        return join(list(self.argv))

    def gather_local(self) -> list[str]:
        p = subprocess.run(list(self.argv), capture_output=True, text=True, stdin=subprocess.DEVNULL)
        return self.parse(p.stdout, p.returncode, p.stderr)

    def parse(self, stdout: str, rc: int, stderr: str = "") -> list[str]:
        if rc != 0:
            raise FactError(f"rsync -n to {self.host} failed (exit {rc}): {stderr.strip()[-400:]}")
        # '.d..t......' on the top directory alone is only a timestamp
        return [ln for ln in lines(stdout) if not ln.startswith(".d") or ln.split(" ", 1)[-1] not in ("./", "")]


@dataclass(frozen=True)
class CopyPlan:
    items: list[str]          # what would be copied (directories left out)
    error: str | None = None  # rsync's last line when it cannot read the source


@dataclass(frozen=True)
class LocalCopyPlan(Fact):
    """What `rsync -a --partial src dest` run on the host itself would copy (`rsync -n -i`)."""

    src: str
    dest: str
    needs_root = True

    def argv(self, dry: bool) -> list[str]:
        return (["rsync", "-a", "--partial", "--mkpath"] + (["-n", "-i", "--out-format=%i %n"] if dry else [])
                + ["--", self.src, self.dest])

    def command(self) -> str:
        return f"{join(self.argv(True))} 2>&1"

    def parse(self, stdout: str, rc: int) -> CopyPlan:
        got = lines(stdout)
        if rc != 0:
            return CopyPlan([], got[-1] if got else f"rsync exit {rc}")
        return CopyPlan([ln for ln in got if not ln.startswith(".d")])
