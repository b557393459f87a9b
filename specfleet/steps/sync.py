"""Copying a tree from the bastion to a host with rsync."""
from __future__ import annotations

import shlex

from ..connection import ssh_argv
from ..facts.rsync import Listing, LocalCopyPlan, LocalListing, RsyncItemize, TreeListing
from ..inventory import Host
from ..quoting import join
from ..step import Change, Step, StepFailed, Values


def local_listing(src: str) -> Listing:
    """The bastion tree's listing hashes (the same ones the host computes of its copy)."""
    return LocalListing(src).gather_local()


class RsyncTree(Step):
    """`dest` on the host is an exact copy of `src` on the bastion.

    The host reports a hash of its copy's listing in the batched probe; only
    when it differs from the bastion's does `rsync -n -i` run (on the bastion,
    over OpenSSH: a bastion fact) to itemize what will change -- also what --check
    shows. An unchanged tree transfers nothing. `--checksum` is optional because it
    reads every byte on both sides; a rebuilt venv with new mtimes needs it to avoid
    re-sending unchanged files (then the listing shortcut is off).
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
        optional = [("--delete", self.delete), ("--checksum", self.checksum),
                    (f"--link-dest={self.link_dest}", self.link_dest),
                    (f"--rsync-path={self.rsync_path}", self.rsync_path)]
        argv += [flag for flag, wanted in optional if wanted] + [f"--exclude={pattern}" for pattern in self.excludes]
        if dry_run:
            argv += ["-n", "-i", "--out-format=%i %n%L"]
        return argv + ["--", self.src, f"{self.host.address}:{self.dest}"]

    @property
    def shortcut(self) -> bool:
        return not (self.checksum or self.excludes)

    def itemize_fact(self) -> RsyncItemize:
        return RsyncItemize(tuple(self.argv(dry_run=True)), self.host.name)

    def facts(self) -> dict:
        if not self.shortcut:
            return {"items": self.itemize_fact()}
        return {"listing": TreeListing(self.dest), "local_listing": LocalListing(self.src)}

    def in_sync(self, values: Values) -> bool:
        """The listings say the copy is exact (no rsync -n needed)."""
        return self.shortcut and values["listing"] == values["local_listing"]

    def bastion_facts(self, values: Values) -> dict:
        if not self.shortcut or self.in_sync(values):
            return {}
        return {"items": self.itemize_fact()}

    def decide(self, facts: Values) -> list[Change]:
        if self.in_sync(facts) or not facts["items"]:
            return []
        items = facts["items"]
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

    def facts(self) -> dict:
        return {"plan": LocalCopyPlan(self.src, self.dest)}

    def decide(self, facts: Values) -> list[Change]:
        plan = facts["plan"]
        if plan.error is not None:
            raise StepFailed(f"cannot read {self.src}: {plan.error}")
        if not plan.items:
            return []
        return [Change(f"copy {len(plan.items)} item(s) into {self.dest}", join(self.facts()["plan"].argv(False)),
                       "\n".join(plan.items[:20]))]
