"""The package is the product: the wheel holds specfleet (with roles/, tasks/, templates/ of the
checkout inside it as specfleet.roles, .tasks, .templates) and nothing else.

Built the way `fab bundle` builds it (specfleet.tasks.bundle.build_wheel: pip wheel, no network
beyond the machine's configured local mirrors for the build backend).
"""
from __future__ import annotations

import zipfile

import pytest

from specfleet.tasks.bundle import build_wheel


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> list[str]:
    whl = build_wheel(tmp_path_factory.mktemp("wheel"))
    return zipfile.ZipFile(whl).namelist()


def test_the_wheel_ships_specfleet_only(wheel_names):
    tops = {n.split("/")[0] for n in wheel_names}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert tops - dist_info == {"specfleet"}, sorted(tops)
    assert not any(n.startswith(("testbed/", "tests/", "roles/", "tasks/", "templates/")) for n in wheel_names)


def test_the_wheel_has_the_roles_tasks_templates_and_runner(wheel_names):
    names = set(wheel_names)
    for need in ("specfleet/roles/__init__.py", "specfleet/roles/nfs.py", "specfleet/tasks/__init__.py",
                 "specfleet/tasks/provision.py", "specfleet/venv_build.py", "specfleet/worker/runner.py",
                 "specfleet/templates/provision/vllm.env.j2", "specfleet/templates/report/report.html.j2",
                 "specfleet/templates/compare/compare.html.j2", "specfleet/templates/compare/compare.md.j2",
                 "specfleet/plan/vllm_releases.json"):
        assert need in names, need


def test_every_module_of_the_package_is_in_the_wheel(wheel_names):
    """pyproject lists the packages by hand: a package added without its line (specfleet/backend/ was,
    once) installs from a checkout and fails from the bundle."""
    from pathlib import Path
    repo = Path(__file__).resolve().parents[2]
    modules = {str(p.relative_to(repo)) for p in (repo / "specfleet").rglob("*.py") if "__pycache__" not in p.parts
               and not {"roles", "tasks", "templates"} & set(p.relative_to(repo / "specfleet").parts[:1])}
    assert modules and not modules - set(wheel_names), sorted(modules - set(wheel_names))


def test_nothing_in_the_package_imports_the_testbed():
    """The CPU-vLLM fix-ups are a module the inventory names (venv_fixups), not an import of testbed."""
    import ast
    from pathlib import Path
    import specfleet
    import specfleet.roles
    import specfleet.tasks
    bad = []
    dirs = {Path(m.__file__).parent for m in (specfleet, specfleet.roles, specfleet.tasks)}  # a checkout: 3 folders
    for f in (f for d in dirs for f in d.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                    else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{f.name}: {m}" for m in mods if m.split(".")[0] in ("testbed", "tests")]
    assert not bad, bad
