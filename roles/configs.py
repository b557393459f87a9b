"""configs: the files the bench runner needs on each worker.

The worker program (specfleet.worker as one zipapp, runner.pyz: stdlib only, so it runs with any
python3 on the worker) and
the datasets the plan reads are placed under the worker's specfleet directory;
`fab bench` writes each campaign's run spec next to them. A dataset (a bastion
file) is placed by its content: `<home>/datasets/<sha256[:16]>/<basename>`, so two
different files called question.jsonl never overwrite each other, and a file
named by both the inventory and a plan is placed once.
"""
from __future__ import annotations

from pathlib import Path

from specfleet.inventory import AbsPath, Host, HostVars
from specfleet.step import Payload, Step
from specfleet.steps.files import Directory, FileContent
from specfleet.roles import Role

from specfleet.worker.layout import RUNNER_ARTEFACT


class ConfigsVars(HostVars):
    specfleet_home: AbsPath = "/var/lib/specfleet"  # the runner, the datasets and (by default) the campaigns


def home(host: Host) -> str:
    return ConfigsVars.of(host).specfleet_home


def runner_path(host: Host) -> str:
    return f"{home(host)}/{RUNNER_ARTEFACT}"


def dataset_path(host: Host, local: str | Path) -> str:
    """Where the bastion file `local` is placed on a worker (by content; see the module doc)."""
    return f"{home(host)}/datasets/{Payload.of_file(local).sha256[:16]}/{Path(local).name}"


def steps(host: Host, datasets: list[str], revert: bool = False) -> list[Step]:
    if revert:
        return [FileContent(runner_path(host), present=False)]
    from specfleet.campaign.spec import worker_zipapp  # here: `fab provision` loads every role, not the campaign
    return [Directory(home(host)), Directory(f"{home(host)}/datasets"),
            FileContent(runner_path(host), worker_zipapp(), mode="0755"),
            *(FileContent(dataset_path(host, ds), source=ds) for ds in datasets)]


ROLE = Role(
    name="configs",
    summary="the bench runner and the inventory's datasets under each worker's specfleet directory",
    steps=lambda host, ctx: steps(host, ctx.datasets),
    revert=lambda host, ctx: steps(host, [], revert=True),
    vars=ConfigsVars,
    reads=("datasets",),
    needs=frozenset({"datasets"}),
    order=80,
)
