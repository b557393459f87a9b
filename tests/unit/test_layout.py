"""The campaign layout is named once (specfleet/worker/layout.py): the runner on the worker and the
bastion that reads and fetches its files use the same names, and no other module spells them."""
import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from specfleet.worker import layout
from specfleet.campaign.spec import WORKER, worker_zipapp

REPO = Path(__file__).resolve().parents[2]
# where the package's code lives (before and after tasks/ and roles/ moved into specfleet/)
CODE_DIRS = [d for d in (REPO / "specfleet", REPO / "tasks", REPO / "roles") if d.is_dir()]
# the names as they appear in code (a literal, or the literal part of an f-string)
NAMES = [layout.RUN_SPEC, layout.STATE, layout.RUNNER_LOG, layout.PROVENANCE, layout.DISK_RESERVE,
         layout.LOCK, ".specfleet-boot", layout.VENV_MANIFEST, layout.DONE_SUFFIX,
         layout.SERVER_LOG_SUFFIX, layout.BENCH_LOG_SUFFIX, layout.PARTIAL_SUFFIX, layout.MODEL,
         layout.VLLM_VERSION, "prompts-fit-"]


def _literals(tree: ast.AST):
    """String constants of the code, docstrings left out (they may say a file's name)."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            yield n.lineno, n.value


def spellings(path: Path) -> list[str]:
    found = []
    for lineno, text in sorted(_literals(ast.parse(path.read_text(encoding="utf-8")))):
        # a result file name built by hand: f"{config}_conc{n}.json" (prose such as
        # "<config>_conc<N>.json" and words such as max_concurrency are not names)
        built = ["_conc"] if text.startswith("_conc") and not text.startswith("_concurrency") else []
        for name in NAMES + built:
            if name in text:
                found.append(f"{path}:{lineno}: {name!r} in {text!r}")
    return found


def test_no_other_module_spells_the_layout():
    files = [p for d in CODE_DIRS for p in sorted(d.rglob("*.py")) if p.resolve() != Path(layout.__file__).resolve()]
    assert len(files) > 20
    found = [s for p in files for s in spellings(p)]
    assert not found, "spell these through specfleet.worker.layout:\n" + "\n".join(found)


def test_the_lint_finds_a_spelling(tmp_path):
    """The check above can fail: a module that writes the state file's name by hand is found."""
    bad = tmp_path / "probe.py"
    bad.write_text('"""state.json in a docstring is fine."""\nPATH = f"{d}/state.json"\nLOG = "x.server.log"\n'
                   'R = f"{c}_conc{n}.json"\nOK = "max_concurrency"\n')
    found = spellings(bad)
    assert [f.split(": ", 1)[1].split(" in ")[0] for f in found] == ["'state.json'", "'.server.log'", "'_conc'"]


def test_layout_is_stdlib_only_and_travels_with_the_runner(tmp_path):
    """layout.py is part of the worker program, imports nothing outside the standard library, and the
    worker's zipapp alone (no site-packages, no specfleet) imports it as the runner does."""
    assert Path(layout.__file__).resolve().parent == WORKER
    tree = ast.parse(Path(layout.__file__).read_text())
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert mods <= set(sys.stdlib_module_names) | {"__future__"}, mods
    (tmp_path / "runner.pyz").write_bytes(worker_zipapp())
    probe = ("from specfleet_worker import runner, host, layout; "
             "print(runner.layout is layout is host.layout, layout.run_dir('/w', 'c', 'h'))")
    p = subprocess.run([sys.executable, "-S", "-I", "-c",
                        f"import sys; sys.path.insert(0, {str(tmp_path / 'runner.pyz')!r}); {probe}"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "/w/c/h"]


def test_names_of_one_item():
    assert layout.result_filename("eagle3", 16) == "eagle3_conc16.json"
    assert layout.result_filename("eagle3", 16, rep=2, repeat=3) == "eagle3_conc16_r2.json"
    assert layout.bench_log("eagle3_conc16_r2.json") == "eagle3_conc16_r2.bench.log"
    m = layout.RESULT_RE.match(layout.result_filename("ngram_improved", 1, rep=3, repeat=3))
    assert (m["config"], m["conc"], m["rep"]) == ("ngram_improved", "1", "3")
    assert json.loads(json.dumps(layout.lock_path("/w"))) == "/w/.specfleet-runner.lock"
    assert importlib.util.find_spec("specfleet.worker.layout") is not None
