"""env: the environment file the bench runner sources (field report §2.3).

Every line is built by specfleet.quoting: keys are shell identifiers, values
single-quoted words, so the file sets exactly the inventory's bytes when
sourced by sh or bash (the runner sources it with sh: host.sourced_env).
"""
from __future__ import annotations

from typing import Annotated

from specfleet.inventory import NEEDED, AbsPath, EnvKey, Host, HostVars, RelPath, Text
from specfleet.quoting import env_key, env_words, q
from specfleet.render import render
from specfleet.step import Step
from specfleet.steps.files import FileContent
from specfleet.roles import Role
from specfleet.roles.venv import VenvVars


class EnvVars(HostVars):
    # written here and sourced by the runner (fab bench's run spec names it); null: the runner sources
    # none (a host whose environment the site owns, e.g. under Slurm, where this role does not run)
    env_file: Annotated[AbsPath | None, NEEDED] = "/etc/specfleet/vllm.env"
    cuda_subdir: RelPath = "nvidia/cu13"            # CUDA_HOME inside the venv's site-packages
    cc: Text = "/usr/bin/gcc"
    extra_env: dict[EnvKey, Text | int | float | bool] = {}


def lines(venv_path: str, python_version: str, cuda_subdir: str, cc: str, extra_env: dict) -> list[str]:
    venv = venv_path.rstrip("/") or "/"
    cuda_home = f"{venv}/lib/python{python_version}/site-packages/{cuda_subdir}"
    out = [
        f"export CUDA_HOME={q(cuda_home)}",
        'export CUDA_PATH="$CUDA_HOME"',
        "export PATH=" + env_words(("lit", f"{venv}/bin:"), ("var", "CUDA_HOME"), ("lit", "/bin:"), ("var", "PATH")),
        f"export VIRTUAL_ENV={q(venv)}",
        f"export CC={q(cc)}",
        'export TRITON_PTXAS_PATH="$CUDA_HOME/bin/ptxas"',
        "export VLLM_USE_FLASHINFER_SAMPLER=0",
    ]
    for key in sorted(extra_env):
        out.append(f"export {env_key(key)}={q(_env_value(extra_env[key]))}")
    return out


def _env_value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def content(host: Host, python_version: str) -> str:
    v = EnvVars.of(host)
    return render("provision/vllm.env.j2", lines=lines(
        VenvVars.of(host).venv_path, python_version, v.cuda_subdir, v.cc, v.extra_env))


def steps(host: Host, python_version: str, revert: bool = False) -> list[Step]:
    env_file = EnvVars.of(host).env_file
    if revert:
        return [FileContent(env_file, present=False)]
    return [FileContent(env_file, content(host, python_version), mode="0644")]


ROLE = Role(
    name="env",
    summary="the environment file the bench runner sources (CUDA_HOME, PATH, CC, extra_env)",
    steps=lambda host, ctx: steps(host, ctx.manifest["python_version"].rsplit(".", 1)[0]),
    revert=lambda host, ctx: steps(host, "", revert=True),
    vars=EnvVars,
    reads=("venv_path",),
    needs=frozenset({"manifest"}),
    order=30,
)
