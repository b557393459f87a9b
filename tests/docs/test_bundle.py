"""`fab bundle` builds an archive that installs specfleet on a bastion with no package index.

Builds the bundle for the running Python, installs it into a fresh venv with the bundle's
install.sh (pip --no-index --find-links wheelhouse; the machine's pip config and its local
mirrors are switched off, so only the bundle's wheels can be used), and runs `fab --list` from
the bundle's directory, which holds fabfile.py (docs/bastion.md says to run fab there).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAB = str(Path(sys.executable).parent / "fab")
PYVER = f"{sys.version_info[0]}.{sys.version_info[1]}"


def offline_env() -> dict:
    """No pip configuration, no index, no extra find-links: the wheelhouse is all there is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "VIRTUAL_ENV"}
    env.update(PIP_CONFIG_FILE="/dev/null", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    p = subprocess.run([FAB, "bundle", "--output", str(out), "--no-handbook"], cwd=ROOT, capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    archives = list(out.glob(f"specfleet-bundle-*-py{PYVER}-*.tar.gz"))
    assert len(archives) == 1, list(out.iterdir())
    where = tmp_path_factory.mktemp("bastion")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(where)  # our own archive, just built
    top = next(where.iterdir())
    base = getattr(sys, "_base_executable", sys.executable)
    p = subprocess.run([str(top / "install.sh")], cwd=top, env={**offline_env(), "PYTHON": base},
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return top


def test_bundle_holds_what_a_bastion_needs(installed):
    for rel in ("install.sh", "fabfile.py", "plans/qwen3-32b.yml", "plans/demo.yml",
                "datasets/sample/question.jsonl", "inventory/example.yml"):
        assert (installed / rel).is_file(), rel
    wheels = [w.name for w in (installed / "wheelhouse").glob("*.whl")]
    for dist in ("specfleet-", "fabric-", "paramiko-", "pydantic_core-", "pandas-", "matplotlib-"):
        assert any(w.lower().startswith(dist) for w in wheels), (dist, wheels)


def test_fab_list_from_the_offline_install(installed):
    env = {**offline_env(), "COLUMNS": "120"}
    p = subprocess.run([str(installed / ".venv/bin/fab"), "--list"], cwd=installed, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in ("provision", "bench", "collect", "facts", "bundle"):
        assert f"\n  {name} " in p.stdout, p.stdout
    # the package is the installed one, not this repository's
    p = subprocess.run([str(installed / ".venv/bin/python"), "-c", "import specfleet, specfleet.tasks; "
                        "print(specfleet.__file__); print(specfleet.tasks.__file__)"], cwd="/", env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and str(ROOT) not in p.stdout and "site-packages" in p.stdout, p.stdout + p.stderr


def test_fab_needs_the_bundles_directory(installed):
    """Outside the directory with fabfile.py, fab finds no tasks: the bastion chapter says where to run it."""
    p = subprocess.run([str(installed / ".venv/bin/fab"), "--list"], cwd="/", env=offline_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "No idea what" in p.stderr + p.stdout or "Can't find any collection" in p.stderr + p.stdout


def test_installed_package_has_its_templates(installed):
    script = ("from specfleet.render import render\n"
              "print(render('provision/nvidia-modules.conf.j2', modules=['nvidia']))\n"
              "from specfleet.report.render import document as r\n"
              "import os; print(sorted(os.listdir(r.TEMPLATE_DIR)))\n")
    p = subprocess.run([str(installed / ".venv/bin/python"), "-c", script], cwd="/", env=offline_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "nvidia" in p.stdout and "report.html.j2" in p.stdout
