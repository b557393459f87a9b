"""configs: the files the bench runner needs on each worker.

The runner script (stdlib only, so it runs with any python3 on the worker) and
the datasets the plan reads are placed under the worker's specfleet directory;
`fab bench` writes each campaign's run spec next to them.
"""
from __future__ import annotations

from pathlib import Path

from specfleet.inventory import Host
from specfleet.step import Step, StepFailed
from specfleet.steps.files import Directory, FileContent

from specfleet.bench.spec import RUNNER_FILES
DEFAULT_HOME = "/var/lib/specfleet"


def home(host: Host) -> str:
    return host.var("specfleet_home", DEFAULT_HOME)


def runner_path(host: Host) -> str:
    return f"{home(host)}/runner.py"


def dataset_path(host: Host, local: str) -> str:
    return f"{home(host)}/datasets/{Path(local).name}"


def steps(host: Host, datasets: list[str], revert: bool = False) -> list[Step]:
    if revert:
        return [FileContent(f"{home(host)}/{f.name}", present=False) for f in RUNNER_FILES]
    out: list[Step] = [Directory(home(host)), Directory(f"{home(host)}/datasets")]
    out += [FileContent(f"{home(host)}/{f.name}", f.read_bytes(), mode="0755") for f in RUNNER_FILES]
    for ds in datasets:
        if not Path(ds).is_file():
            raise StepFailed(f"dataset {ds} (inventory bastion var 'datasets') is not a file on the bastion")
        out.append(FileContent(dataset_path(host, ds), Path(ds).read_bytes()))
    return out
