"""venv: build the workers' venv on the bastion (specfleet.venv_build); no worker steps.

The roles that need the bastion venv's manifest (venv-deploy, env) declare needs={"manifest"}:
when `venv` is not chosen, the manifest of the venv already built is read instead.
"""
from __future__ import annotations

from specfleet import venv_build
from specfleet.errors import UserError
from specfleet.step import Status, StepFailed, StepResult

from . import Context, Role


def bastion_manifest(ctx: Context, build: bool) -> None:
    """Build (or just read) the bastion's venv into ctx.manifest; None (recorded failed) when it failed."""
    ctx.manifest_tried = True
    fleet, console, inv = ctx.fleet, ctx.console, ctx.inventory
    try:
        spec = venv_build.VenvSpec.from_vars(inv.bastion_vars, where=f"{inv.path}: bastion")
        if build:
            outcome = venv_build.build(spec, check=ctx.check, log=lambda m: console.print(f"[dim]  bastion: {m}[/]"))
            status = Status.CHANGED if outcome.changed else Status.OK
            fleet.record_local(StepResult("bastion", "venv", status, message=outcome.message))
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
        fleet.record_local(StepResult("bastion", "venv", Status.FAILED, message=str(e)))
        console.print(f"[bold red]{'failed':>12}[/] bastion  venv: {e}", markup=True)
        ctx.manifest = None


ROLE = Role(
    name="venv",
    summary="build the workers' venv on the bastion, at the workers' path (bastion only)",
    steps=lambda host, ctx: [],
    reads=("venv_path", "base_python", "venv_requirements", "venv_verify_packages", "venv_fixups",
           "wheelhouse", "pip_timeout", "pip_retries", "pip_attempts", "gpu_arch"),
    needs=frozenset({"manifest"}),
    order=10,
    bastion=lambda ctx: bastion_manifest(ctx, build=True),
)
