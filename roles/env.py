"""env: the environment file the bench runner sources (field report §2.3)."""
from __future__ import annotations

from specfleet.inventory import Host
from specfleet.render import render
from specfleet.step import Step
from specfleet.steps.files import FileContent

DEFAULT_ENV_FILE = "/etc/specfleet/vllm.env"


def env_file(host: Host) -> str:
    return host.var("env_file", DEFAULT_ENV_FILE)


def content(host: Host, python_version: str) -> str:
    return render(
        "provision/vllm.env.j2",
        venv_path=host.require("venv_path"),
        python_version=python_version,
        cuda_subdir=host.var("cuda_subdir", "nvidia/cu13"),
        cc=host.var("cc", "/usr/bin/gcc"),
        extra_env=host.var("extra_env", {}) or {},
    )


def steps(host: Host, python_version: str, revert: bool = False) -> list[Step]:
    if revert:
        return [FileContent(env_file(host), present=False)]
    return [FileContent(env_file(host), content(host, python_version), mode="0644")]
