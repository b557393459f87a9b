"""venv-deploy (workers): the bastion's venv, at the same path, switched atomically.

Each version of the venv lands in `<venv>.releases/<release id>/` (rsync,
hard-linking unchanged files against the current release), then `<venv>` -- a
symlink -- is flipped to it in one rename. The release id is the build digest
plus a hash of the bastion venv's listing (paths, sizes, modes, mtimes): a venv
changed in place (a pip install into it by hand) gets a new id, so a deploy
never writes into the release that is live, and a copy cut short (Ctrl-C, a
dropped link) leaves the live venv as it was. The previous release stays for
`--revert venv-deploy`. An unchanged venv transfers nothing: same id, same
directory, same listing.
"""
from __future__ import annotations

import os
import subprocess

from specfleet.inventory import Host
from specfleet.shell import q
from specfleet.step import Change, Facts, Step, StepFailed
from specfleet.steps.command import Command
from specfleet.steps.sync import LISTING, RsyncTree, local_listing

LISTING_ID_CHARS = 12


def releases_dir(venv: str) -> str:
    return venv.rstrip("/") + ".releases"


def release_id(venv: str, manifest: dict) -> str:
    """`<build digest>-<listing hash>` of the bastion's venv: changes whenever its content does."""
    return f"{manifest['digest']}-{local_listing(venv)[:LISTING_ID_CHARS]}"


# The listing without bytecode caches: Python rewrites a stale .pyc where it runs (a worker's
# first import after a source changed), and checks each one against its source itself.
CODE_LISTING = LISTING.replace("find . -printf", "find . -name __pycache__ -prune -o -printf")


class ReleaseCopy(RsyncTree):
    """The release directory is a copy of the bastion's venv; the live release is never written.

    The id names the content, so a live release can differ from the bastion's only if it changed
    on the host: bytecode caches Python wrote there are left alone; anything else is refused
    (with the way out), never repaired in place.
    """

    def __init__(self, host: Host, venv: str, release: str, rsync_path: str | None):
        super().__init__(host, venv, release, link_dest=f"{venv}/", rsync_path=rsync_path)
        self.venv = venv.rstrip("/")

    def probe(self) -> str:
        return (f"echo \"LIVE $(readlink {q(self.venv)})\"; "
                f"cd {q(self.dest)} 2>/dev/null && {{ {LISTING}; {CODE_LISTING}; }} || echo NONE")

    def decide(self, facts: Facts) -> list[Change]:
        lines = facts.stdout.splitlines() + ["", "", ""]
        live, listing, code = lines[0].removeprefix("LIVE ").rstrip("/"), lines[1], lines[2]
        if live != self.dest.rstrip("/") or listing == local_listing(self.src):
            return super().decide(Facts(listing + "\n", facts.rc))
        if code == code_listing(self.src):
            return []  # only bytecode caches differ
        raise StepFailed(f"{self.dest.rstrip('/')} is the live venv here and was changed on this host "
                         "(it differs from the bastion's); specfleet never writes into a live release: "
                         "`fab provision --revert venv-deploy`, then `fab provision` deploys a fresh copy")


def code_listing(src: str) -> str:
    p = subprocess.run(["bash", "-c", f"cd {q(src)} && {CODE_LISTING}"], capture_output=True, text=True, check=True)
    return p.stdout.strip()


class NotBuiltYet(Step):
    """Check mode before the bastion's venv exists: the copy that would follow its build."""

    needs_root = False

    def __init__(self, venv: str):
        self.venv = venv
        self.name = f"rsync {venv}/ (once built on the bastion)"

    def decide(self, facts: Facts) -> list[Change]:
        return [Change(f"copy the bastion's venv {self.venv} here once it is built",
                       f"echo {q(f'the bastion has no venv at {self.venv} yet')} >&2; exit 1")]


class BaseInterpreter(Step):
    """The worker has the venv's base interpreter at the same path and version."""

    needs_root = False

    def __init__(self, path: str, version: str):
        self.path, self.version = path, version
        self.name = f"base interpreter {path} {version}"

    def probe(self) -> str:
        return f"{q(self.path)} -c 'import sys; print(\".\".join(map(str, sys.version_info[:3])))' 2>&1"

    def decide(self, facts: Facts) -> list[Change]:
        got = facts.lines[-1] if facts.lines else ""
        if facts.rc != 0 or not got[:1].isdigit():
            raise StepFailed(f"{self.path} is missing here: install Python {self.version} at {self.path} "
                             "(the venv's scripts and pyvenv.cfg point at it)")
        if got.rsplit(".", 1)[0] != self.version.rsplit(".", 1)[0]:
            raise StepFailed(f"{self.path} is Python {got} here but {self.version} on the bastion: "
                             "the venv's compiled packages need the same minor version")
        return []


class CurrentRelease(Step):
    """`venv` is a symlink to `release`; the one it replaced is remembered for rollback."""

    def __init__(self, venv: str, release: str):
        self.venv, self.release = venv.rstrip("/"), release.rstrip("/")
        self.name = f"{self.venv} -> {self.release}"

    def probe(self) -> str:
        v = q(self.venv)
        return (f"if [ -L {v} ]; then echo \"LINK $(readlink {v})\"; elif [ -d {v} ]; then echo DIR; "
                f"elif [ -e {v} ]; then echo OTHER; else echo ABSENT; fi")

    def decide(self, facts: Facts) -> list[Change]:
        state = facts.lines[0] if facts.lines else "ABSENT"
        v, rel, rels = q(self.venv), q(self.release), q(releases_dir(self.venv))
        flip = f"ln -sfn {rel} {q(self.venv + '.specfleet-new')} && mv -Tf {q(self.venv + '.specfleet-new')} {v}"
        if state == f"LINK {self.release}":
            return []
        if state == "OTHER":
            raise StepFailed(f"{self.venv} exists and is neither a directory nor a symlink")
        pre = ""
        if state.startswith("LINK "):
            pre = f"printf '%s\\n' {q(state[5:])} > {rels}/previous && "
        elif state == "DIR":
            # a venv copied by hand (as in the field report) becomes the rollback target
            pre = (f"mv -T {v} {rels}/manual-copy && printf '%s\\n' {q(releases_dir(self.venv) + '/manual-copy')}"
                   f" > {rels}/previous && ")
        return [Change(f"switch {self.venv} to {self.release}", pre + flip,
                       f"-{self.venv} ({state.lower()})\n+{self.venv} -> {self.release}")]


class PruneReleases(Step):
    """Keep the current and the previous release; older ones only fill the disk."""

    def __init__(self, venv: str, keep: str):
        self.venv, self.keep = venv.rstrip("/"), keep.rstrip("/")
        self.name = f"prune old releases of {self.venv}"

    def probe(self) -> str:
        rels = q(releases_dir(self.venv))
        return (f"cat {rels}/previous 2>/dev/null | sed 's/^/PREV /'; "
                f"find {rels} -mindepth 1 -maxdepth 1 -type d -printf 'REL %f\\n' 2>/dev/null")

    def decide(self, facts: Facts) -> list[Change]:
        prev = next((ln[5:] for ln in facts.lines if ln.startswith("PREV ")), "")
        rels = releases_dir(self.venv)
        old = [f"{rels}/{ln[4:]}" for ln in facts.lines if ln.startswith("REL ")]
        old = [p for p in old if p not in (self.keep, prev)]
        if not old:
            return []
        return [Change(f"remove {len(old)} old release(s)",
                       "rm -rf -- " + " ".join(f"{q(p)} {q(p + '.verified')}" for p in old),
                       "\n".join(f"-{p}" for p in old))]


class Rollback(Step):
    """Flip `venv` back to the release recorded as previous."""

    name = "roll back to the previous venv"

    def __init__(self, venv: str):
        self.venv = venv.rstrip("/")

    def probe(self) -> str:
        v, rels = q(self.venv), q(releases_dir(self.venv))
        return f"echo \"NOW $(readlink {v})\"; echo \"PREV $(cat {rels}/previous 2>/dev/null)\""

    def decide(self, facts: Facts) -> list[Change]:
        kv = dict(ln.split(" ", 1) for ln in facts.lines if " " in ln)
        now, prev = kv.get("NOW", ""), kv.get("PREV", "")
        if not prev:
            raise StepFailed(f"no previous release of {self.venv} recorded: nothing to roll back to")
        if now == prev:
            return []
        new = q(self.venv + ".specfleet-new")
        return [Change(f"switch {self.venv} back to {prev}",
                       f"printf '%s\\n' {q(now)} > {q(releases_dir(self.venv))}/previous && "
                       f"ln -sfn {q(prev)} {new} && mv -Tf {new} {q(self.venv)}",
                       f"-{self.venv} -> {now}\n+{self.venv} -> {prev}")]


def steps(host: Host, manifest: dict, revert: bool = False) -> list[Step]:
    venv = host.require("venv_path")
    if revert:
        return [Rollback(venv)]
    interpreter = BaseInterpreter(manifest["base_python"], manifest["python_version"])
    if not os.path.isdir(venv):  # only in check mode: otherwise provision stops first (tasks/provision.py)
        return [interpreter, NotBuiltYet(venv)]
    release = f"{releases_dir(venv)}/{release_id(venv, manifest)}"
    rsync_path = "sudo -n rsync" if host.needs_sudo else None
    imports = "; ".join(f"import {m}" for m in manifest.get("packages", {}) or {"sys": None})
    return [
        interpreter,
        ReleaseCopy(host, venv, release, rsync_path),
        CurrentRelease(venv, release),
        PruneReleases(venv, release),
        # imported once per release and host: a real vLLM import takes seconds, and the
        # release directory is named by content, so one success holds until it changes
        Command("venv imports its packages here",
                f"{q(venv)}/bin/python -c {q(imports)} && touch {q(release + '.verified')}",
                creates=release + ".verified"),
    ]
