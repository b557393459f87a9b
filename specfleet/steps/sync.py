"""Copying a tree from the bastion to a host with rsync."""
from __future__ import annotations

import shlex
import subprocess

from ..connection import ssh_argv
from ..inventory import Host
from ..step import Change, Facts, Step, StepFailed


class RsyncTree(Step):
    """`dest` on the host is an exact copy of `src` on the bastion.

    The probe is `rsync -n -i` run on the bastion (that is also what --check
    shows): an unchanged tree itemizes nothing and transfers nothing.
    `--checksum` is optional because it reads every byte on both sides; a
    rebuilt venv with new mtimes needs it to avoid re-sending unchanged files.
    """

    needs_root = False  # rsync runs on the bastion, as the login user

    def __init__(self, host: Host, src: str, dest: str, *, delete: bool = True, checksum: bool = False,
                 excludes: tuple[str, ...] = (), link_dest: str | None = None, rsync_path: str | None = None):
        self.host, self.src, self.dest = host, src.rstrip("/") + "/", dest.rstrip("/") + "/"
        self.rsync_path = rsync_path  # e.g. "sudo -n rsync" to write root-owned paths as a login user
        self.delete, self.checksum, self.excludes, self.link_dest = delete, checksum, excludes, link_dest
        self.name = f"rsync {self.src} -> {dest}"

    def argv(self, dry_run: bool) -> list[str]:
        argv = ["rsync", "-a", "--protect-args", "--mkpath", "-e", shlex.join(ssh_argv(self.host))]
        if self.delete:
            argv.append("--delete")
        if self.checksum:
            argv.append("--checksum")
        if self.link_dest:
            argv.append(f"--link-dest={self.link_dest}")
        if self.rsync_path:
            argv.append(f"--rsync-path={self.rsync_path}")
        for pattern in self.excludes:
            argv.append(f"--exclude={pattern}")
        if dry_run:
            argv += ["-n", "-i", "--out-format=%i %n%L"]
        return argv + ["--", self.src, f"{self.host.address}:{self.dest}"]

    def local_facts(self) -> Facts:
        p = subprocess.run(self.argv(dry_run=True), capture_output=True, text=True)
        if p.returncode != 0:
            raise StepFailed(f"rsync -n to {self.host.name} failed (exit {p.returncode}): "
                             f"{p.stderr.strip()[-400:]}")
        return Facts(p.stdout, p.returncode)

    def decide(self, facts: Facts) -> list[Change]:
        # itemized lines; '.d..t......' on the top directory alone is only a timestamp
        items = [ln for ln in facts.lines if not ln.startswith(".d") or ln.split(" ", 1)[-1] not in ("./", "")]
        if not items:
            return []
        summary = f"sync {len(items)} item(s) to {self.dest}"
        return [Change(summary, local_argv=self.argv(dry_run=False), diff="\n".join(items[:50]) +
                       (f"\n... and {len(items) - 50} more" if len(items) > 50 else ""))]


class RemoteCopy(Step):
    """`dest` on the host is a copy of `src` on the same host (rsync run there; resumable).

    Used to stage the model from the NFS share to local disk: --partial keeps a
    half-copied shard, so an interrupted copy continues where it stopped.
    """

    probe_needs_root = True

    def __init__(self, src: str, dest: str):
        self.src, self.dest = src.rstrip("/") + "/", dest.rstrip("/") + "/"
        self.name = f"copy {self.src} -> {self.dest}"

    def _argv(self, dry: bool) -> str:
        from ..shell import join
        argv = ["rsync", "-a", "--partial", "--mkpath"] + (["-n", "-i", "--out-format=%i %n"] if dry else [])
        return join(argv + ["--", self.src, self.dest])

    def probe(self) -> str:
        return f"{self._argv(True)} 2>&1 | grep -v '^\\.d' ; true"

    def decide(self, facts: Facts) -> list[Change]:
        if any("No such file" in ln or "rsync error" in ln for ln in facts.lines):
            raise StepFailed(f"cannot read {self.src}: {facts.lines[-1]}")
        if not facts.lines:
            return []
        return [Change(f"copy {len(facts.lines)} item(s) into {self.dest}", self._argv(False),
                       "\n".join(facts.lines[:20]))]
