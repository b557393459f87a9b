"""venv: build the workers' venv on the bastion (specfleet.venv_build); no worker steps.

With `venv_source: provided` nothing is built: the workers already have the venv (a pre-built
image), ctx.manifest says so (provided_manifest) and venv-deploy checks it instead of copying.

The roles that need the bastion venv's manifest (venv-deploy, env) declare needs={"manifest"}:
when `venv` is not chosen, the manifest of the venv already built is read instead.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from specfleet import venv_build
from specfleet.inventory import AbsPath, ExecPath, PyMinor, PyModule, Requirement, Word
from specfleet.errors import UserError
from specfleet.step import Status, StepFailed

from . import Context, Role


PROVIDED = "provided"


class VenvVars(BaseModel):
    """The workers' venv, built on the bastion (venv) and copied to each worker (venv-deploy); the
    build's own defaults (pip timeouts, base python) are specfleet.venv_build.VenvSpec's."""

    venv_path: ExecPath | None = None          # where the workers have it (and the bastion builds it)
    base_python: ExecPath | None = None
    venv_requirements: list[Requirement] | None = Field(default=None, min_length=1)
    venv_verify_packages: list[PyModule] | None = None
    venv_fixups: PyModule | None = None  # a module with post_install_fixups(venv), imported on the bastion
    wheelhouse: AbsPath | None = None
    pip_timeout: int | None = Field(default=None, ge=1)
    pip_retries: int | None = Field(default=None, ge=0)
    pip_attempts: int | None = Field(default=None, ge=1)
    gpu_arch: Word | None = None
    # bastion: build the venv and copy it; provided: the workers already have it at venv_path (a
    # pre-built image), venv-deploy checks it instead (docs/provisioning.md "A provided venv")
    venv_source: Literal["bastion", "provided"] | None = None
    venv_python_version: PyMinor | None = None


def is_provided(vars: dict) -> bool:
    """`venv_source: provided`: the workers already have the venv at venv_path (a pre-built image)."""
    return vars.get("venv_source") == PROVIDED


def provided_manifest(inv) -> dict:
    """What the roles after venv read (env: the Python minor version) when nothing is built here."""
    v = inv.bastion_vars
    where = f"{inv.path}: bastion"
    if not v.get("venv_path"):
        raise UserError(f"{where}, field 'venv_path': venv_source: provided needs the venv's path on the workers")
    if not v.get("venv_python_version"):
        raise UserError(f"{where}, field 'venv_python_version': venv_source: provided needs the provided venv's "
                        "Python minor version (e.g. '3.12'; the env file's CUDA_HOME is under lib/python<it>)")
    return {"provided": True, "digest": None, "python_version": v["venv_python_version"],
            "packages": {m: None for m in v.get("venv_verify_packages") or []}}


def bastion_manifest(ctx: Context, build: bool) -> None:
    """Build (or just read) the bastion's venv into ctx.manifest; None (recorded failed) when it failed."""
    ctx.manifest_tried = True
    fleet, console, inv = ctx.fleet, ctx.console, ctx.inventory
    if is_provided(inv.bastion_vars):
        ctx.manifest = provided_manifest(inv)
        msg = f"venv_source: provided: nothing built here; each worker's {inv.bastion_vars['venv_path']} is checked"
        fleet.record_local_for("bastion", "venv", Status.OK, msg)
        console.print(f"{'venv':>12} bastion  {msg}")
        return
    try:
        spec = venv_build.VenvSpec.from_vars(inv.bastion_vars, where=f"{inv.path}: bastion")
        if build:
            outcome = venv_build.build(spec, check=ctx.check, log=lambda m: console.print(f"[dim]  bastion: {m}[/]"))
            status = Status.CHANGED if outcome.changed else Status.OK
            fleet.record_local_for("bastion", "venv", status, outcome.message)
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
