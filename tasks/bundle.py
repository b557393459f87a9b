"""`fab bundle`: everything a bastion without internet needs, in one archive.

Built on a machine with internet (or a PyPI mirror): a wheelhouse of specfleet and all its
dependencies for the bastion's Python version and platform, the fabfile, the plans, the sample
dataset, the example inventory, the handbook (when mkdocs is installed) and `install.sh`, which
installs with `pip install --no-index --find-links wheelhouse` (docs/bastion.md).
"""
from __future__ import annotations

import os
import platform as _platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from invoke import task
from invoke.exceptions import Exit

import specfleet

ROOT = Path(specfleet.__file__).resolve().parents[1]  # the checkout: specfleet/ beside pyproject.toml
# what a bastion runs fab with, besides the installed package (paths relative to the repository)
SHIPPED = ["fabfile.py", "plans", "datasets/sample", "inventory/example.yml", "docs/requirements.txt"]

INSTALL_SH = """\
#!/bin/sh
# Install specfleet from this bundle, without any package index.
#   ./install.sh [VENV]       default VENV: .venv beside this script
# Then run fab from this directory (it holds fabfile.py, plans/ and datasets/):
#   cd {name} && .venv/bin/fab --list
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv=${{1:-$here/.venv}}
python=${{PYTHON:-python3}}
want="{pyver}"
have=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$have" != "$want" ]; then
  echo "install.sh: this bundle is for Python $want, but $python is $have (set PYTHON=/usr/bin/python$want)" >&2
  exit 1
fi
"$python" -m venv "$venv"
"$venv/bin/pip" install --no-index --find-links "$here/wheelhouse" specfleet
echo "specfleet installed in $venv"
echo "run fab from $here:  cd $here && $venv/bin/fab --list"
"""


def _version() -> str:
    import tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _platform_tags() -> list[str]:
    """Platform tags this machine's pip accepts (linux_x86_64, manylinux_2_36_x86_64, ...)."""
    try:
        from packaging import tags
    except ImportError:  # pragma: no cover
        from pip._vendor.packaging import tags
    out: list[str] = []
    for t in tags.sys_tags():
        if t.platform not in out and t.platform != "any":
            out.append(t.platform)
    return out


# A manylinux_2_N tag names a glibc; pip takes each --platform as one exact tag, so a bundle for glibc
# 2.39 must also name every older manylinux tag that glibc runs (pandas ships manylinux_2_17 only).
# 2_17 is the oldest manylinux_2_N (PEP 600); the legacy names are aliases of 2_17, 2_12 and 2_5 (the
# last two were made for x86_64 and i686 only).
_MANYLINUX = re.compile(r"manylinux_2_(\d+)_(\w+)")
_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def expand_platforms(given: list[str]) -> list[str]:
    """Each given tag, and after a manylinux_2_N_ARCH tag every older manylinux tag for ARCH (what a
    system of that glibc accepts, newest first); given as repeated --platform or comma-separated."""
    out: list[str] = []
    for tag in (t.strip() for g in given for t in g.split(",")):
        m = _MANYLINUX.fullmatch(tag)
        older = [tag]
        if m:
            glibc, arch = int(m.group(1)), m.group(2)
            older = [f"manylinux_2_{n}_{arch}" for n in range(glibc, 16, -1)]
            older += [f"{legacy}_{arch}" for n, legacy in _LEGACY.items()
                      if n <= glibc and (n == 17 or arch in ("x86_64", "i686"))]
        out += [t for t in older if t and t not in out]
    return out


def shipped_files(root: Path = ROOT) -> tuple[list[str], str | None]:
    """The SHIPPED paths' files, relative to root: in a git checkout the tracked ones only (`git
    ls-files`: a draft plan or a local dataset beside them stays out); outside one (a source archive)
    every file there, with a note saying so."""
    p = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--", *SHIPPED], capture_output=True, text=True)
    if p.returncode == 0:
        return sorted(f for f in p.stdout.split("\0") if f and (root / f).is_file()), None
    files = []
    for rel in SHIPPED:
        src = root / rel
        found = [src] if src.is_file() else [f for f in src.rglob("*") if f.is_file() and "__pycache__" not in f.parts]
        files += [str(f.relative_to(root)) for f in found]
    return sorted(files), (f"{root} is not a git checkout: every file under {', '.join(SHIPPED)} goes in, "
                           "tracked or not (build from a clone to pack only the repository's files)")


# what `pip wheel` needs to build specfleet: built from a copy holding only these, so a checkout's
# stale build/lib (setuptools packs whatever is there) or other trees never reach the wheel. The copy
# follows specfleet/'s symlinks: roles/, tasks/ and templates/ land inside it as plain folders.
WHEEL_SOURCES = ["pyproject.toml", "README.md", "specfleet"]


def build_wheel(dest: Path) -> Path:
    """specfleet's own wheel, built from a clean copy of its sources; returns the wheel's path."""
    with tempfile.TemporaryDirectory(prefix="specfleet-src-") as src:
        for rel in WHEEL_SOURCES:
            if (ROOT / rel).is_dir():
                shutil.copytree(ROOT / rel, Path(src) / rel, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(ROOT / rel, Path(src) / rel)
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dest), src],
             "pip wheel . (specfleet itself)")
    return next(Path(dest).glob("specfleet-*.whl"))


def _run(argv: list[str], what: str) -> None:
    print(f"bundle: {what}", flush=True)
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        raise Exit(f"error: {what} failed (exit {p.returncode}):\n{(p.stdout + p.stderr).strip()[-3000:]}", code=2)


@task(help={
    "python_version": "the bastion's Python, e.g. 3.12 (default: the Python running fab)",
    "platform": "the bastion's pip platform tag, e.g. manylinux_2_39_x86_64 (for glibc 2.39); a manylinux_2_N "
                "tag takes the older manylinux tags too, as that glibc does (repeatable or comma-separated; "
                "default: every tag this machine accepts)",
    "output": "directory for the archive (default dist/)",
    "handbook": "include the handbook site, built with mkdocs (default; --no-handbook leaves it out; "
                "skipped with a note when mkdocs is not installed: pip install -r docs/requirements.txt)",
}, iterable=["platform"])
def bundle(c, python_version=None, platform=None, output="dist", handbook=True):
    """Build the offline bundle: wheels of specfleet and its dependencies, fabfile, plans, dataset, install.sh."""
    pyver = python_version or f"{sys.version_info[0]}.{sys.version_info[1]}"
    if not all(part.isdigit() for part in pyver.split(".")) or pyver.count(".") != 1:
        raise Exit(f"error: --python-version takes MAJOR.MINOR, e.g. 3.12, not {pyver!r}", code=1)
    platforms = expand_platforms(list(platform)) if platform else _platform_tags()
    label = platforms[0] if platform else f"linux_{_platform.machine()}"
    name = f"specfleet-bundle-{_version()}-py{pyver}-{label}"
    out_dir = (ROOT / output) if not os.path.isabs(output) else Path(output)
    archive = out_dir / f"{name}.tar.gz"
    if handbook and not (Path(sys.executable).parent / "mkdocs").exists():
        print("bundle: no handbook in the bundle (mkdocs is not installed: pip install -r docs/requirements.txt)")
        handbook = False
    pip = [sys.executable, "-m", "pip"]
    with tempfile.TemporaryDirectory(prefix="specfleet-bundle-") as tmp:
        top = Path(tmp) / name
        wheels = top / "wheelhouse"
        wheels.mkdir(parents=True)
        own = build_wheel(wheels)
        plat = [a for p in platforms for a in ("--platform", p)]
        _run(pip + ["download", "-q", "--only-binary=:all:", "--python-version", pyver, *plat,
                    "-d", str(wheels), str(own)],
             f"pip download of the dependencies for Python {pyver} ({', '.join(platforms[:3])}"
             f"{', ...' if len(platforms) > 3 else ''})")
        files, note = shipped_files()
        if note:
            print(f"bundle: note: {note}")
        for rel in files:
            (top / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, top / rel)
        if handbook:
            mkdocs = str(Path(sys.executable).parent / "mkdocs")
            _run([mkdocs, "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"), "-d", str(top / "handbook")],
                 "mkdocs build (the handbook)")
        (top / "install.sh").write_text(INSTALL_SH.format(name=name, pyver=pyver))
        (top / "install.sh").chmod(0o755)
        (top / "README.txt").write_text(
            f"specfleet {_version()} offline bundle for Python {pyver} ({label}).\n\n"
            "  ./install.sh                  # venv in .venv, from wheelhouse/ only (no index)\n"
            "  .venv/bin/fab --list          # run fab from this directory: it holds fabfile.py,\n"
            "                                # plans/ and datasets/ (relative paths in plans)\n"
            + ("  handbook/index.html           # the handbook, offline\n" if handbook else "")
            + "\nSee the handbook's 'Setting up the bastion' chapter (docs/bastion.md).\n")
        out_dir.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(top, arcname=name)
    count = len(list(tarfile.open(archive).getnames()))
    print(f"bundle: wrote {archive} ({archive.stat().st_size / 2**20:.1f} MiB, {count} entries)")
