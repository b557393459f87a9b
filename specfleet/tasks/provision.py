"""`fab provision` and `fab stage-model`: everything a worker needs before a benchmark."""
from __future__ import annotations

import os
from pathlib import Path

from invoke import task
from invoke.exceptions import Exit
from rich.table import Table

from specfleet.roles import configs, env, model, network, nfs, nvidia, venv, venv_deploy
from specfleet.errors import UserError
from specfleet.fleet import EXIT_BAD_INPUT
from specfleet.step import Status, StepFailed, StepResult
from specfleet.tasks.common import fleet_help, fleet_run

ROLES = ["venv", "venv-deploy", "env", "nvidia", "nfs", "network", "model", "configs"]
REVERTIBLE = ["venv-deploy", "env", "nvidia", "nfs", "configs"]


def _roles(only: str | None) -> list[str]:
    if not only:
        return list(ROLES)
    chosen = [r.strip() for r in only.split(",") if r.strip()]
    bad = [r for r in chosen if r not in ROLES]
    if bad:
        raise Exit(f"error: --only names unknown role(s) {', '.join(bad)} (roles: {', '.join(ROLES)})",
                   code=EXIT_BAD_INPUT)
    return [r for r in ROLES if r in chosen]


@task(help=fleet_help(
    only=f"comma list of roles to run (default all: {', '.join(ROLES)})",
    revert=f"undo what one role did: {', '.join(REVERTIBLE)}",
    remove_dup_ip="remove the duplicate addresses held by this host (live and in its netplan file)",
))
def provision(c, inventory=None, hosts=None, check=False, diff=False, only=None, revert=None, remove_dup_ip=None,
              forks=32, serial=False, accept_new_host_keys=False, verbose=False):
    """Build the venv on the bastion and make every worker ready: venv, env file, GPU, NFS, model, configs."""
    roles = _roles(only)
    if revert and revert not in REVERTIBLE:
        raise Exit(f"error: --revert takes one of {', '.join(REVERTIBLE)}", code=EXIT_BAD_INPUT)
    with fleet_run("provision", inventory=inventory, hosts=hosts, check=check, diff=diff, forks=forks,
                   serial=serial, accept_new_host_keys=accept_new_host_keys, verbose=verbose,
                   default_hosts="workers") as (fleet, inv, rep):
        if revert:
            fleet.play(lambda h: _revert_steps(revert, h, inv))
            return
        datasets = _datasets(inv) if "configs" in roles else []  # bad input stops before any work
        manifest = None
        if "venv" in roles or "venv-deploy" in roles or "env" in roles:
            manifest = _bastion_venv(fleet, inv, rep, check, build="venv" in roles)

        def steps_for(host):
            out = []
            if "venv-deploy" in roles and manifest:
                out += venv_deploy.steps(host, manifest)
            if "env" in roles and manifest:
                out += env.steps(host, manifest["python_version"].rsplit(".", 1)[0])
            if "nvidia" in roles:
                out += nvidia.steps(host)
            if "nfs" in roles:
                out += nfs.steps(host)
            if "network" in roles:
                out.append(network.Addresses())
            if "model" in roles:
                out += model.steps(host)
            if "configs" in roles:
                out += configs.steps(host, datasets)
            return out

        results = fleet.play(_guarded(steps_for))
        if "network" in roles:
            _duplicates(fleet, results, rep, remove_dup_ip)
        if "model" in roles:
            _models(results, rep)


def _datasets(inv) -> list[Path]:
    """The inventory's `datasets`: bastion files, a relative path relative to the inventory file."""
    out = []
    for i, name in enumerate(inv.bastion_vars.get("datasets") or []):
        path = Path(os.path.expanduser(str(name)))
        path = path if path.is_absolute() else inv.path.parent / path
        if not path.is_file() or not os.access(path, os.R_OK):
            raise UserError(f"{inv.path}: bastion, field 'datasets' (entry {i + 1}): {os.path.abspath(path)} is not a "
                            "readable file on the bastion (a relative path is relative to the inventory file)")
        out.append(path)
    return out


def _guarded(steps_for):
    """A host whose inventory lacks a var a role needs fails alone, with the var's name."""
    from specfleet.steps.command import Assert

    def inner(host):
        try:
            return steps_for(host)
        except (KeyError, StepFailed) as e:
            return [Assert("inventory vars", "false", str(e).strip("'\""))]
    return inner


def _revert_steps(role, host, inv):
    if role == "venv-deploy":
        return venv_deploy.steps(host, {}, revert=True)
    if role == "env":
        return env.steps(host, "", revert=True)
    if role == "nvidia":
        return nvidia.steps(host, revert=True)
    if role == "nfs":
        return nfs.steps(host, revert=True)
    return configs.steps(host, [], revert=True)


def _bastion_venv(fleet, inv, rep, check, build):
    """Build (or just read) the bastion's venv; returns its manifest, or None when it failed."""
    try:
        spec = venv.VenvSpec.from_vars(inv.bastion_vars)
        if build:
            outcome = venv.build(spec, check=check, log=lambda m: rep.console.print(f"[dim]  bastion: {m}[/]"))
            status = Status.CHANGED if outcome.changed else Status.OK
            fleet.record_local(StepResult("bastion", "venv", status, message=outcome.message))
            rep.console.print(f"{'venv':>12} bastion  {outcome.message}")
            manifest = outcome.manifest
        else:
            manifest = venv.read_manifest(spec.path)
            if not manifest and not check:
                raise UserError(f"{inv.path}: bastion, field 'venv_path': the bastion has no venv built by "
                                f"specfleet at {spec.path} (build it: `fab provision --only venv`)")
        if not manifest or "python_version" not in manifest:
            # check mode before the first build: describe what would be deployed
            manifest = {"digest": spec.digest(), "base_python": spec.base_python,
                        "python_version": venv.check_base_python(spec.base_python), "packages": {}}
        return manifest
    except (venv.VenvError, StepFailed) as e:
        fleet.record_local(StepResult("bastion", "venv", Status.FAILED, message=str(e)))
        rep.console.print(f"[bold red]{'failed':>12}[/] bastion  venv: {e}", markup=True)
        return None


def _duplicates(fleet, results, rep, remove_host):
    addrs = {h: r.data["addresses"] for h, rs in results.items() for r in rs if "addresses" in r.data}
    dups = network.find_duplicates(addrs)
    if not dups:
        rep.console.print("[green]network: no IPv4 address is held by two hosts[/]")
    else:
        table = Table(title="DUPLICATE IPv4 ADDRESSES (ARP conflicts: fix before benchmarking)",
                      title_justify="left", title_style="bold red")
        table.add_column("address")
        table.add_column("held by")
        for d in dups:
            table.add_row(d.ip, ", ".join(f"{h} ({i})" for h, i, _ in d.holders))
        rep.console.print(table)
        fleet.warn(f"duplicate IPv4 addresses: " + "; ".join(
            f"{d.ip} on {', '.join(h for h, _, _ in d.holders)}" for d in dups))
    if remove_host:
        targets = [h for h in fleet.hosts if h.name == remove_host]
        if not targets:
            raise Exit(f"error: --remove-dup-ip {remove_host}: not a selected host", code=EXIT_BAD_INPUT)
        fleet.play(lambda h: network.removal_steps(h.name, dups), hosts=targets)


def _models(results, rep):
    table = Table(title="model directories", title_justify="left")
    for col in ("host", "serves from", "weights", "size"):
        table.add_column(col)
    for host, rs in results.items():
        m = next((r.data["model"] for r in rs if r.data.get("model")), None)
        if m:
            table.add_row(host, m["path"], str(m["weights"]), f"{m['size_bytes'] / 2**30:.2f} GiB")
    if table.row_count:
        rep.console.print(table)


@task(help=fleet_help(forks="how many hosts copy at once (default 8: the share's bandwidth is shared)"))
def stage_model(c, inventory=None, hosts=None, check=False, diff=False, forks=8, serial=False,
                accept_new_host_keys=False, verbose=False):
    """Copy the model from the NFS share to each worker's local disk (resumable; cuts 10-minute loads)."""
    with fleet_run("stage-model", inventory=inventory, hosts=hosts, check=check, diff=diff, forks=forks,
                   serial=serial, accept_new_host_keys=accept_new_host_keys, verbose=verbose,
                   default_hosts="workers") as (fleet, inv, rep):
        fleet.play(_guarded(model.stage_steps))
