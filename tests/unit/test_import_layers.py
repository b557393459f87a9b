"""The imports run tasks -> roles -> core, never upward (issue 13): read from the source, not run."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "specfleet"
RANK = {"core": 0, "roles": 1, "tasks": 2}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ("roles", "tasks") else "core"


def module_of(f: Path, root: Path) -> str:
    return ".".join(f.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")


def imports(f: Path, root: Path = PKG) -> list[str]:
    """The specfleet modules `f` imports, relative imports resolved."""
    mod = module_of(f, root)
    pkg = mod.split(".") if f.name == "__init__.py" else mod.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(f.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = pkg[:len(pkg) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            out += [target] if node.module else [f"{target}.{a.name}" for a in node.names]
    return [m for m in out if m.split(".")[0] == "specfleet"]


def test_no_module_imports_a_higher_layer():
    bad = []
    for f in sorted(PKG.rglob("*.py")):
        mod = module_of(f, PKG)
        bad += [f"{mod} imports {t}" for t in imports(f) if RANK[layer(t)] > RANK[layer(mod)]]
    assert not bad, bad


def test_the_reader_sees_upward_imports(tmp_path):
    """Absolute and relative forms are both resolved (a check that cannot fail proves nothing)."""
    fake = tmp_path / "specfleet" / "bench" / "split.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("from ..roles import configs\nfrom specfleet.tasks.bench import x\nfrom . import plan\n")
    got = imports(fake, tmp_path / "specfleet")
    assert got == ["specfleet.roles", "specfleet.tasks.bench", "specfleet.bench.plan"], got
    assert [layer(m) for m in got] == ["roles", "tasks", "core"]
