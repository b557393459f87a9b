"""venv-deploy (workers): the bastion's venv, at the same path, switched atomically.

Each version of the venv lands in `<venv>.releases/<release id>/` (rsync,
hard-linking unchanged files against the current release), then `<venv>` -- a
symlink -- is flipped to it in one rename. The release id is the build digest
plus a hash of the bastion venv's listing (paths, sizes, modes, mtimes): a venv
changed in place (a pip install into it by hand) gets a new id, so a deploy
never writes into the release that is live, and a copy cut short (Ctrl-C, a
dropped link) leaves the live venv as it was. The previous release stays for
`--revert venv-deploy`. An unchanged venv transfers nothing: same id, same
directory, same listing. With `venv_source: provided` (a pre-built image) nothing is
copied: the worker's own venv is checked (ProvidedVenv) and imports its packages.
"""
from __future__ import annotations

import os

from specfleet.facts.files import FileText, Link, SubDirs
from specfleet.facts.system import PythonVersion
from specfleet.inventory import Host
from specfleet.shell import q
from specfleet.step import Change, Step, StepFailed, Values
from specfleet.steps.command import Assert, Command
from specfleet.steps.sync import RsyncTree, local_listing
from specfleet.roles import Role
from specfleet.roles.venv import PROVIDED, VenvVars

LISTING_ID_CHARS = 12


def releases_dir(venv: str) -> str:
    return venv.rstrip("/") + ".releases"


def flip(venv: str, target: str) -> str:
    """The shell that points the symlink `venv` at `target` in one rename (never a moment without it)."""
    new = q(venv + ".specfleet-new")
    return f"ln -sfn {q(target)} {new} && mv -Tf {new} {q(venv)}"


def imports(manifest: dict) -> str:
    return "; ".join(f"import {m}" for m in manifest.get("packages") or {"sys": None})


def release_id(venv: str, manifest: dict) -> str:
    """`<build digest>-<listing hash>` of the bastion's venv: changes whenever its content does."""
    return f"{manifest['digest']}-{local_listing(venv).tree[:LISTING_ID_CHARS]}"


class ReleaseCopy(RsyncTree):
    """The release directory is a copy of the bastion's venv; the live release is never written.

    The id names the content, so a live release can differ from the bastion's only if it changed
    on the host: bytecode caches Python wrote there are left alone; anything else is refused
    (with the way out), never repaired in place.
    """

    def __init__(self, host: Host, venv: str, release: str, rsync_path: str | None):
        super().__init__(host, venv, release, link_dest=f"{venv}/", rsync_path=rsync_path)
        self.venv = venv.rstrip("/")

    def facts(self) -> dict:
        return {**super().facts(), "live": Link(self.venv)}  # "listing" holds the code's hash too

    def _is_live(self, values: Values) -> bool:
        live = values["live"]
        return live.kind == "link" and live.target.rstrip("/") == self.dest.rstrip("/")

    def bastion_facts(self, values: Values) -> dict:
        if self._is_live(values) and not self.in_sync(values):
            return {}  # the two code hashes decide (no rsync -n into a live release)
        return super().bastion_facts(values)

    def decide(self, facts: Values) -> list[Change]:
        if not self._is_live(facts) or self.in_sync(facts):
            return super().decide(facts)
        here, there = facts.get("listing"), facts.get("local_listing")
        if here is not None and there is not None and here.code == there.code:
            return []  # only bytecode caches differ
        raise StepFailed(f"{self.dest.rstrip('/')} is the live venv here and was changed on this host "
                         "(it differs from the bastion's); specfleet never writes into a live release: "
                         "`fab provision --revert venv-deploy`, then `fab provision` deploys a fresh copy")


class NotBuiltYet(Step):
    """Check mode before the bastion's venv exists: the copy that would follow its build."""

    needs_root = False

    def __init__(self, venv: str):
        self.venv = venv
        self.name = f"rsync {venv}/ (once built on the bastion)"

    def decide(self, facts: Values) -> list[Change]:
        return [Change(f"copy the bastion's venv {self.venv} here once it is built",
                       f"echo {q(f'the bastion has no venv at {self.venv} yet')} >&2; exit 1")]


class BaseInterpreter(Step):
    """The worker has the venv's base interpreter at the same path and version."""

    needs_root = False

    def __init__(self, path: str, version: str):
        self.path, self.version = path, version
        self.name = f"base interpreter {path} {version}"

    def facts(self) -> dict:
        return {"python": PythonVersion(self.path)}

    def decide(self, facts: Values) -> list[Change]:
        got = facts["python"].version
        if got is None:
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

    def facts(self) -> dict:
        return {"venv": Link(self.venv)}

    def decide(self, facts: Values) -> list[Change]:
        now = facts["venv"]
        v, rels = q(self.venv), q(releases_dir(self.venv))
        if now.kind == "link" and now.target == self.release:
            return []
        if now.kind == "other":
            raise StepFailed(f"{self.venv} exists and is neither a directory nor a symlink")
        pre = ""
        if now.kind == "link":
            pre = f"printf '%s\\n' {q(now.target)} > {rels}/previous && "
        elif now.kind == "dir":
            # a venv copied by hand (as in the field report) becomes the rollback target
            pre = (f"mv -T {v} {rels}/manual-copy && printf '%s\\n' {q(releases_dir(self.venv) + '/manual-copy')}"
                   f" > {rels}/previous && ")
        was = f"link {now.target}" if now.kind == "link" else now.kind
        return [Change(f"switch {self.venv} to {self.release}", pre + flip(self.venv, self.release),
                       f"-{self.venv} ({was})\n+{self.venv} -> {self.release}")]


class PruneReleases(Step):
    """Keep the current and the previous release; older ones only fill the disk."""

    def __init__(self, venv: str, keep: str):
        self.venv, self.keep = venv.rstrip("/"), keep.rstrip("/")
        self.name = f"prune old releases of {self.venv}"

    def facts(self) -> dict:
        rels = releases_dir(self.venv)
        return {"previous": FileText(f"{rels}/previous"), "releases": SubDirs(rels)}

    def decide(self, facts: Values) -> list[Change]:
        prev = facts["previous"] or ""
        rels = releases_dir(self.venv)
        old = [f"{rels}/{name}" for name in facts["releases"] if f"{rels}/{name}" not in (self.keep, prev)]
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

    def facts(self) -> dict:
        return {"venv": Link(self.venv), "previous": FileText(f"{releases_dir(self.venv)}/previous")}

    def decide(self, facts: Values) -> list[Change]:
        now, prev = facts["venv"].target or "", facts["previous"] or ""
        if not prev:
            raise StepFailed(f"no previous release of {self.venv} recorded: nothing to roll back to")
        if now == prev:
            return []
        return [Change(f"switch {self.venv} back to {prev}",
                       f"printf '%s\\n' {q(now)} > {q(releases_dir(self.venv))}/previous && " + flip(self.venv, prev),
                       f"-{self.venv} -> {now}\n+{self.venv} -> {prev}")]


class ProvidedVenv(Step):
    """`venv_source: provided`: the venv is already on this worker (a pre-built image); check it, copy nothing."""

    needs_root = False

    def __init__(self, venv: str, version: str):
        self.venv, self.version = venv.rstrip("/"), version
        self.name = f"provided venv {self.venv} (Python {version})"

    def facts(self) -> dict:
        return {"python": PythonVersion(f"{self.venv}/bin/python")}

    def decide(self, facts: Values) -> list[Change]:
        got = facts["python"].version
        if got is None:
            raise StepFailed(f"{self.venv}/bin/python does not run here (venv_source: provided: the worker must "
                             f"already have the venv at {self.venv})")
        if got.rsplit(".", 1)[0] != self.version:
            raise StepFailed(f"{self.venv}/bin/python is Python {got} here, but the inventory's "
                             f"venv_python_version is {self.version}")
        return []


def provided_steps(host: Host, manifest: dict) -> list[Step]:
    venv = VenvVars.of(host).venv_path.rstrip("/")
    return [ProvidedVenv(venv, manifest["python_version"]),
            Assert("provided venv imports its packages", f"{q(venv)}/bin/python -c {q(imports(manifest))}",
                   f"{venv}/bin/python cannot `{imports(manifest)}` here (venv_verify_packages)")]


def steps(host: Host, manifest: dict, revert: bool = False) -> list[Step]:
    venv = VenvVars.of(host).venv_path
    if manifest.get("provided"):
        return [] if revert else provided_steps(host, manifest)
    if revert:
        return [Rollback(venv)]
    interpreter = BaseInterpreter(manifest["base_python"], manifest["python_version"])
    if not os.path.isdir(venv):  # only in check mode: otherwise provision stops first (tasks/provision.py)
        return [interpreter, NotBuiltYet(venv)]
    release = f"{releases_dir(venv)}/{release_id(venv, manifest)}"
    rsync_path = "sudo -n rsync" if host.needs_sudo else None
    return [
        interpreter,
        ReleaseCopy(host, venv, release, rsync_path),
        CurrentRelease(venv, release),
        PruneReleases(venv, release),
        # imported once per release and host: a real vLLM import takes seconds, and the
        # release directory is named by content, so one success holds until it changes
        Command("venv imports its packages here",
                f"{q(venv)}/bin/python -c {q(imports(manifest))} && touch {q(release + '.verified')}",
                creates=release + ".verified"),
    ]


ROLE = Role(
    name="venv-deploy",
    summary="copy the bastion's venv to each worker as a release, switch the venv symlink to it",
    steps=lambda host, ctx: steps(host, ctx.manifest),
    revert=lambda host, ctx: steps(host, {"provided": VenvVars.of(host).venv_source == PROVIDED},
                                             revert=True),
    reads=("venv_path", "venv_source"),  # declared by the venv role
    needs=frozenset({"manifest"}),
    order=20,
)
