"""The bastion venv builder: build the workers' venv once, on the bastion, at the workers' path.

Not a role (nothing here touches a worker): the `venv` role (specfleet.roles.venv) calls it,
and `venv-deploy` copies what it built.

Field report §2.2: the cluster has no internet, so the venv is built on the
bastion and copied. That only works when the venv sits at the same absolute
path everywhere (scripts carry absolute shebangs) and was made from an
interpreter the workers have at the same path (pyvenv.cfg names it) -- never
a pyenv shim. pip on the flaky mirror stalled; short --timeout, --retries and
an outer retry loop converge because pip's cache keeps what finished.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tenacity import RetryError, Retrying, retry_if_not_exception_type, stop_after_attempt, wait_exponential

from specfleet.worker.layout import VENV_MANIFEST
from specfleet.facts.system import PYTHON_VERSION_FLAG, PythonVersion

# what building a local requirement leaves in its directory: not part of its content
BUILD_LITTER = {"build", "dist", "__pycache__", ".pytest_cache"}

# Runs inside the built venv: versions of the packages the plan needs, and
# torch's CUDA arch list when torch is there (the report checked sm_120).
VERIFY_CODE = r"""
import importlib, importlib.metadata as md, json, sys
out = {"python": ".".join(map(str, sys.version_info[:3])), "packages": {}, "import_errors": {}}
for name in sys.argv[1:]:
    try:
        mod = importlib.import_module(name)
        out["packages"][name] = getattr(mod, "__version__", None) or md.version(name)
    except Exception as e:
        out["import_errors"][name] = f"{type(e).__name__}: {e}"
try:
    import torch
    out["cuda_arch_list"] = torch.cuda.get_arch_list()
except Exception:
    out["cuda_arch_list"] = None
try:
    import vllm
    out["simulated"] = bool(getattr(vllm, "SIMULATED", False))
except Exception:
    pass
print(json.dumps(out))
"""


class VenvError(Exception):
    pass


class PermanentPipError(VenvError):
    """An install that fails the same way however often it runs: not retried."""


# pip's and uv's words for what no retry changes: a file or folder that is not there, a name no index or
# wheelhouse has, requirements that contradict each other. A network failure on the way (pip retried its
# reads, a mirror stalled) makes "No matching distribution" transient: NETWORK_ERRORS win.
PERMANENT_ERRORS = ("does not exist", "No matching distribution found", "Invalid requirement",
                    "is not installable", "ResolutionImpossible", "conflicting dependencies",
                    "Distribution not found at", "No solution found when resolving")
NETWORK_ERRORS = ("Retrying (Retry(", "NewConnectionError", "ConnectTimeout", "ReadTimeout", "timed out",
                  "Connection broken", "Connection refused", "Temporary failure in name resolution",
                  "HTTPError", "ProxyError", "SSLError", "Failed to fetch", "Failed to download")


def permanent_pip_error(stderr: str) -> bool:
    return any(w in stderr for w in PERMANENT_ERRORS) and not any(w in stderr for w in NETWORK_ERRORS)


@dataclass
class VenvSpec:
    path: str
    base_python: str
    requirements: list[str]
    # the values below come from the inventory (roles/venv.py: venv_spec, with VenvVars' defaults)
    verify_packages: list[str]
    gpu_arch: str | None
    pip_timeout: int
    pip_retries: int
    attempts: int
    wheelhouse: str | None
    # a Python module the inventory names (venv_fixups), run after pip: the CPU vLLM build needs
    # `testbed.realvllm.build_venv` (docs/engines-real.md). It lives outside the package: it is
    # imported from the bastion's sys.path (the directory fab runs in), never shipped in the wheel.
    fixups: str | None

    def digest(self) -> str:
        """What the venv is built from; a change means a rebuild. Local requirement dirs count by content."""
        h = hashlib.sha256()
        fixups = str(self.fixups)
        if self.fixups:  # a change in the fix-ups must rebuild the venv too
            mod = fixup_module(self.fixups)
            fixups += f"@{getattr(mod, 'FIXUP_REVISION', '')}@{_module_digest(mod)}"
        for item in [self.base_python, *self.requirements, str(self.wheelhouse), fixups]:
            h.update(item.encode() + b"\0")
            p = Path(item)
            if p.is_dir():
                for f in sorted(p.rglob("*")):
                    rel = f.relative_to(p)
                    if f.is_file() and not any(part in BUILD_LITTER or part.endswith(".egg-info")
                                               for part in rel.parts):
                        h.update(str(rel).encode() + f.read_bytes())
        return h.hexdigest()[:12]


def fixup_module(name: str):
    """The fix-up module `venv_fixups` names: importable on the bastion, with post_install_fixups(venv)."""
    try:
        mod = importlib.import_module(name)
    except ImportError as e:
        raise VenvError(f"venv_fixups: cannot import {name!r} on the bastion ({e}); run fab from the "
                        "directory that holds it, or put it on PYTHONPATH") from None
    if not callable(getattr(mod, "post_install_fixups", None)):
        raise VenvError(f"venv_fixups: module {name!r} has no post_install_fixups(venv) function")
    return mod


def _module_digest(mod) -> str:
    src = getattr(mod, "__file__", None)
    return hashlib.sha256(Path(src).read_bytes()).hexdigest()[:12] if src else ""


@dataclass
class BuildOutcome:
    changed: bool
    message: str
    manifest: dict


def check_base_python(path: str) -> str:
    """The interpreter's version, or a VenvError saying why it cannot be the base."""
    real = os.path.realpath(path)
    if not os.path.exists(path):
        raise VenvError(f"base interpreter {path} does not exist on the bastion")
    if ".pyenv" in real or "/shims/" in real:
        raise VenvError(f"base interpreter {path} is a pyenv interpreter ({real}); workers do not have it. "
                        "Use the system python the workers have at the same path, e.g. /usr/bin/python3.12")
    try:  # the same command and parser as the workers' BaseInterpreter step
        p = subprocess.run([path, PYTHON_VERSION_FLAG], capture_output=True, text=True)
    except OSError as e:  # a directory, or not executable
        raise VenvError(f"base interpreter {path} cannot run: {e.strerror}") from None
    got = PythonVersion(path).parse(p.stdout + p.stderr, p.returncode)
    if got.version is None:
        raise VenvError(f"base interpreter {path} does not run: {got.output}")
    return got.version


def read_manifest(path: str) -> dict | None:
    try:
        return json.loads((Path(path) / VENV_MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def build(spec: VenvSpec, *, check: bool = False, log: Callable[[str], None] = print) -> BuildOutcome:
    version = check_base_python(spec.base_python)
    digest = spec.digest()
    current = read_manifest(spec.path)
    if current and current.get("digest") == digest and Path(spec.path, "bin", "python").exists():
        return BuildOutcome(False, f"venv {spec.path} is up to date ({digest})", current)
    reason = "requirements changed" if current else "no venv yet"
    if check:
        return BuildOutcome(True, f"would build venv {spec.path} ({reason})", current or {})
    t0 = time.monotonic()
    log(f"building venv {spec.path} from {spec.base_python} ({reason})")
    subprocess.run([spec.base_python, "-m", "venv", "--clear", spec.path], check=True)
    _pip_with_retries(install_argv(spec), spec.attempts, log)
    if spec.fixups:
        fixup_module(spec.fixups).post_install_fixups(spec.path)
    verified = verify(spec)
    manifest = {"digest": digest, "base_python": spec.base_python, "python_version": version,
                "requirements": spec.requirements, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "build_seconds": round(time.monotonic() - t0, 1), **verified}
    (Path(spec.path) / VENV_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return BuildOutcome(True, f"built venv {spec.path} ({digest}) in {manifest['build_seconds']} s", manifest)


def uv_binary() -> str | None:
    """uv next to the running interpreter (installed into fab's venv) or on PATH; None without it."""
    here = Path(sys.executable).parent / "uv"
    return str(here) if here.is_file() and os.access(here, os.X_OK) else shutil.which("uv")


def install_argv(spec: VenvSpec) -> list[str]:
    """The install command. From a wheelhouse (--no-index: every wheel is already local, nothing is
    resolved against an index or pip's configuration) uv installs the same files faster than pip
    (the CPU vLLM venv, 3.5 GB, on 2 shared cores: 31-112 s by the load vs 157 s), so it is used
    when it is there; otherwise pip."""
    uv = uv_binary() if spec.wheelhouse else None
    if uv:
        return [uv, "pip", "install", "--python", f"{spec.path}/bin/python", "--no-cache", "--link-mode", "copy",
                "--no-index", "--find-links", spec.wheelhouse, *spec.requirements]
    pip = [f"{spec.path}/bin/pip", "install", "--disable-pip-version-check",
           "--timeout", str(spec.pip_timeout), "--retries", str(spec.pip_retries)]
    if spec.wheelhouse:
        pip += ["--no-index", "--find-links", spec.wheelhouse]
    return pip + spec.requirements


def _pip_with_retries(argv: list[str], attempts: int, log: Callable[[str], None]) -> None:
    """pip itself retries each download; this loop retries the whole install (cache keeps progress),
    except after an error no retry changes (permanent_pip_error), which is raised at once."""
    def once():
        p = subprocess.run(argv, capture_output=True, text=True)
        if p.returncode != 0:
            err = p.stderr.strip()
            if permanent_pip_error(err):
                raise PermanentPipError(f"pip install failed (exit {p.returncode}; not retried: no retry changes "
                                        f"this): {err[-1500:]}")
            log(f"pip failed (exit {p.returncode}): {err.splitlines()[-1:]} -- retrying")
            raise VenvError(err[-1500:])
    try:
        for attempt in Retrying(stop=stop_after_attempt(attempts), wait=wait_exponential(multiplier=1, max=30),
                                retry=retry_if_not_exception_type(PermanentPipError), reraise=False):
            with attempt:
                once()
    except RetryError as e:
        raise VenvError(f"pip install failed {attempts} times; last error: {e.last_attempt.exception()}") from None


def verify(spec: VenvSpec) -> dict:
    p = subprocess.run([f"{spec.path}/bin/python", "-c", VERIFY_CODE, *spec.verify_packages],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise VenvError(f"the new venv's python fails: {p.stderr.strip()[-400:]}")
    info = json.loads(p.stdout.strip().splitlines()[-1])
    if info["import_errors"]:
        raise VenvError(f"imports fail in the new venv: {info['import_errors']}")
    arches = info.get("cuda_arch_list")
    if spec.gpu_arch and arches is not None and spec.gpu_arch not in arches:
        raise VenvError(f"torch in the venv supports {arches}, not the GPU's {spec.gpu_arch}: "
                        "install a torch build for this CUDA version")
    return info


def remove(path: str) -> None:
    if Path(path, VENV_MANIFEST).exists():  # only a venv specfleet built
        shutil.rmtree(path)
