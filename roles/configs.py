"""configs: the files the bench runner needs on each worker.

The runner script (stdlib only, so it runs with any python3 on the worker) and
the datasets the plan reads are placed under the worker's specfleet directory;
`fab bench` writes each campaign's run spec next to them.
"""
from __future__ import annotations

from pathlib import Path

from specfleet.inventory import Host
from specfleet.step import Step
from specfleet.steps.files import Directory, FileContent

RUNNER_SRC = Path(__file__).resolve().parent.parent / "specfleet" / "bench" / "runner.py"
DEFAULT_HOME = "/var/lib/specfleet"


def home(host: Host) -> str:
    return host.var("specfleet_home", DEFAULT_HOME)


def runner_path(host: Host) -> str:
    return f"{home(host)}/runner.py"


def dataset_path(host: Host, local: str) -> str:
    return f"{home(host)}/datasets/{Path(local).name}"


def steps(host: Host, datasets: list[str], revert: bool = False) -> list[Step]:
    if revert:
        return [FileContent(runner_path(host), present=False)]
    out: list[Step] = [Directory(home(host)), Directory(f"{home(host)}/datasets"),
                       FileContent(runner_path(host), RUNNER_SRC.read_bytes(), mode="0755")]
    for ds in datasets:
        out.append(FileContent(dataset_path(host, ds), Path(ds).read_bytes()))
    return out
