"""venv: build the workers' venv on the bastion (specfleet.venv_build); no worker steps.

With `venv_source: provided` nothing is built: the workers already have the venv (a pre-built
image), ctx.manifest says so (provided_manifest) and venv-deploy checks it instead of copying.

The roles that need the bastion venv's manifest (venv-deploy, env) declare needs={"manifest"}:
when `venv` is not chosen, the manifest of the venv already built is read instead.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

from pydantic import Field

from specfleet import venv_build
from specfleet.inventory import NEEDED, ExecPath, HostVars, Line, PyMinor, PyModule, Requirement, Word
from specfleet.errors import UserError
from specfleet.step import Status, StepFailed

from . import Context, Role


PROVIDED = "provided"


class VenvVars(HostVars):
    """The workers' venv, built on the bastion (venv) and copied to each worker (venv-deploy). Its
    defaults are the build's (`venv_spec` turns these vars into specfleet.venv_build.VenvSpec). A
    worker's readers (venv-deploy, env) need venv_path; the bastion's say what a build lacks themselves
    (`bastion_vars`)."""

    venv_path: Annotated[ExecPath | None, NEEDED] = None  # where the workers have it (and the bastion builds it)
    base_python: ExecPath | None = None
    venv_requirements: list[Requirement] | None = Field(default=None, min_length=1)
    venv_verify_packages: list[PyModule] = Field(default_factory=lambda: ["vllm"])  # imported after a build
    venv_fixups: PyModule | None = None  # a module with post_install_fixups(venv), imported on the bastion
    wheelhouse: Line | None = None             # a bastion folder; relative: to the inventory file
    pip_timeout: int = Field(default=30, ge=1)     # pip --timeout, seconds per network read
    pip_retries: int = Field(default=3, ge=0)      # pip --retries
    pip_attempts: int = Field(default=5, ge=1)     # the whole install, with exponential back-off
    gpu_arch: Word | None = None
    # bastion: build the venv and copy it; provided: the workers already have it at venv_path (a
    # pre-built image), venv-deploy checks it instead (docs/provisioning.md "A provided venv")
    venv_source: Literal["bastion", "provided"] | None = None
    venv_python_version: PyMinor | None = None


def is_local_path(requirement: str) -> bool:
    """A requirement pip reads as a file or folder (./pkg, ../wheels/x.whl, /srv/pkg, ~/pkg), not a name,
    a name @ URL or a URL."""
    r = requirement.strip()
    return "://" not in r and "@" not in r and (r.startswith((".", "/", "~")) or "/" in r
                                                 or r.endswith((".whl", ".tar.gz", ".zip")))


def bastion_path(value: str, base: Path | None, where: str, field: str, must_exist: bool = True) -> str:
    """A bastion path of the inventory, a relative one relative to the inventory file's folder (as
    `datasets`); one that is not there is refused here, naming file and field, not by pip 5 times."""
    path = Path(os.path.expanduser(value))
    if not path.is_absolute() and base is not None:
        path = base / path
    if must_exist and not path.exists():
        raise venv_build.VenvError(f"{where}, field {field!r}: {os.path.abspath(path)} does not exist on the bastion "
                                   "(a relative path is relative to the inventory file)")
    return os.path.abspath(path)


def bastion_vars(vars: Mapping[str, Any]) -> VenvVars:
    """The bastion's venv vars, typed, an unset one (absent or null) at its default; the caller says what
    its use lacks (a build, a provided venv), each in its own words."""
    return VenvVars.model_validate({k: vars[k] for k in VenvVars.model_fields if vars.get(k) is not None})


def venv_spec(vars: dict, where: str = "bastion", base: Path | None = None) -> venv_build.VenvSpec:
    """The build's spec from the inventory's vars; a var left unset (absent or null) takes VenvVars' default.
    `base`: the inventory file's folder, which a relative local requirement and wheelhouse are relative to."""
    missing = [k for k in ("venv_path", "base_python", "venv_requirements") if not vars.get(k)]
    if missing:
        raise venv_build.VenvError(f"{where}, field(s) {', '.join(repr(k) for k in missing)}: inventory vars "
                                   "missing for the venv (set them in the bastion's or all's vars)")
    v = bastion_vars(vars)
    requirements = [bastion_path(r, base, where, f"venv_requirements (entry {i + 1})") if is_local_path(r) else r
                    for i, r in enumerate(v.venv_requirements)]
    wheelhouse = bastion_path(v.wheelhouse, base, where, "wheelhouse", must_exist=False) if v.wheelhouse else None
    return venv_build.VenvSpec(path=v.venv_path, base_python=v.base_python, requirements=requirements,
                               verify_packages=list(v.venv_verify_packages), gpu_arch=v.gpu_arch,
                               pip_timeout=v.pip_timeout, pip_retries=v.pip_retries, attempts=v.pip_attempts,
                               wheelhouse=wheelhouse, fixups=v.venv_fixups)


def provided_manifest(inv) -> dict:
    """What the roles after venv read (env: the Python minor version) when nothing is built here."""
    v = bastion_vars(inv.bastion_vars)
    where = f"{inv.path}: bastion"
    if not v.venv_path:
        raise UserError(f"{where}, field 'venv_path': venv_source: provided needs the venv's path on the workers")
    if not v.venv_python_version:
        raise UserError(f"{where}, field 'venv_python_version': venv_source: provided needs the provided venv's "
                        "Python minor version (e.g. '3.12'; the env file's CUDA_HOME is under lib/python<it>)")
    return {"provided": True, "digest": None, "python_version": v.venv_python_version,
            "packages": {m: None for m in v.venv_verify_packages}}


def bastion_manifest(ctx: Context, build: bool) -> None:
    """Build (or just read) the bastion's venv into ctx.manifest; None (recorded failed) when it failed."""
    ctx.manifest_tried = True
    fleet, console, inv = ctx.fleet, ctx.console, ctx.inventory
    v = bastion_vars(inv.bastion_vars)
    if v.venv_source == PROVIDED:
        ctx.manifest = provided_manifest(inv)
        msg = f"venv_source: provided: nothing built here; each worker's {v.venv_path} is checked"
        fleet.record_local_for("bastion", "venv", Status.OK, msg)
        console.print(f"{'venv':>12} bastion  {msg}")
        return
    try:
        spec = venv_spec(inv.bastion_vars, where=f"{inv.path}: bastion", base=Path(inv.path).parent)
        if build:
            outcome = venv_build.build(spec, check=ctx.check, log=lambda m: console.print(f"[dim]  bastion: {m}[/]"))
            fleet.record_local_for("bastion", "venv", Status.CHANGED if outcome.changed else Status.OK, outcome.message)
            console.print(f"{'venv':>12} bastion  {outcome.message}")
            manifest = outcome.manifest
        else:
            manifest = venv_build.read_manifest(spec.path)
            if not manifest and not ctx.check:
                raise UserError(f"{inv.path}: bastion, field 'venv_path': the bastion has no venv built by "
                                f"specfleet at {spec.path} (build it: `fab provision --only venv`)")
        if not manifest or "python_version" not in manifest:
            # check mode before the first build: describe what would be deployed
            manifest = {"digest": spec.digest(), "base_python": spec.base_python,
                        "python_version": venv_build.check_base_python(spec.base_python), "packages": {}}
        ctx.manifest = manifest
    except (venv_build.VenvError, StepFailed) as e:
        fleet.record_local_for("bastion", "venv", Status.FAILED, str(e))
        console.print(f"[bold red]{'failed':>12}[/] bastion  venv: {e}", markup=True)
        ctx.manifest = None


ROLE = Role(
    name="venv",
    summary="build the workers' venv on the bastion, at the workers' path (bastion only)",
    steps=lambda host, ctx: [],
    vars=VenvVars,
    needs=frozenset({"manifest"}),
    order=10,
    bastion=lambda ctx: bastion_manifest(ctx, build=True),
)
