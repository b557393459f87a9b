"""The docs/dev how-tos stay true: their code is taken from the pages and run.

- "Add a role": the page's module and template are written into a temporary copy of the package;
  with no other edit, the role is in `fab --help provision`, `--only` and `--revert`, its steps
  render the template, and a bad value of its own vars is one error line naming file, host and field.
- "Add a fact": the page's fact, in a copy of the package, parses the page's fixture.
- "Add a report column": the page's two entries put the column in a report of real result files.
- "Add a bench flag": the page's two insertions (after the lines they name) make the plan's field a
  word of the worker's `vllm bench serve` command; a bad value is the plan's one-line error.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAB = str(Path(sys.executable).parent / "fab")
DEV = ROOT / "docs" / "dev"
# a fenced block whose first line names the file it is: `# path` (Python) or `{# path #}` (Jinja)
BLOCK = re.compile(r"^```(?:python|jinja)\n(?:# |\{# )(?P<path>(?:specfleet|roles|tasks|templates)/\S+?)(?: #\})?\n(?P<body>.*?)^```$",
                   re.S | re.M)


def page_files(page: str) -> dict[str, str]:
    text = (DEV / page).read_text()
    out = {}
    for m in BLOCK.finditer(text):
        first = "# " + m["path"] if m["path"].endswith(".py") else "{# " + m["path"] + " #}"
        out[m["path"]] = first + "\n" + m["body"]
    return out


def project_copy(tmp: Path, files: dict[str, str]) -> Path:
    dst = tmp / "project"
    for part in ("specfleet", "roles", "tasks", "templates"):  # the package and its top-level parts
        # specfleet/'s symlinks stay links, so the copy's specfleet.roles is the copy's roles/
        shutil.copytree(ROOT / part, dst / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "fabfile.py", dst / "fabfile.py")
    for rel, body in files.items():
        (dst / rel).write_text(body)
    return dst


def run(argv, cwd: Path, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd), "COLUMNS": "200"}  # the copy's specfleet, not the repo's
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=180, **kw)


@pytest.fixture(scope="module")
def with_sysctl(tmp_path_factory) -> Path:
    files = page_files("add-a-role.md")
    assert set(files) == {"roles/sysctl.py", "templates/provision/sysctl.conf.j2"}, files
    return project_copy(tmp_path_factory.mktemp("add-a-role"), files)


def test_the_role_is_in_provision_help_only_and_revert(with_sysctl):
    p = run([FAB, "--help", "provision"], with_sysctl)
    assert p.returncode == 0, p.stderr
    help_text = " ".join(p.stdout.split())
    only = re.search(r"--only=STRING (.*?)--remove-dup-ip", help_text)[1]
    revert = re.search(r"--revert=STRING (.*?)--serial", help_text)[1]
    assert "nvidia, sysctl, nfs" in only, only       # order=45: between nvidia and nfs
    assert "sysctl" in revert, revert
    bad = run([FAB, "provision", "--only", "nosuch"], with_sysctl)
    assert bad.returncode == 1 and "sysctl" in bad.stderr and "nosuch" in bad.stderr, bad.stderr
    # the repository itself (no sysctl module) does not list it: the module alone made the difference
    p = run([FAB, "--help", "provision"], ROOT)
    assert "sysctl" not in p.stdout


def test_the_roles_steps_render_its_template(with_sysctl, tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(textwrap.dedent("""\
        all: {user: root}
        hosts:
          w1: {address: 127.0.0.1, vars: {sysctl_settings: {net.core.somaxconn: 4096, vm.max_map_count: 262144}}}
          w2: {address: 127.0.0.2}
        """))
    script = textwrap.dedent(f"""\
        import json
        from specfleet.inventory import load_inventory
        from specfleet.roles import Context, get, vars_model
        inv = load_inventory({str(inv)!r}, vars_model=vars_model())
        role = get("sysctl")
        out = {{}}
        for name, host in inv.hosts.items():
            steps = role.steps(host, Context(inventory=inv))
            out[name] = {{"file": steps[0].path, "content": steps[0].payload.data.decode(),
                         "revert": [type(s).__name__ for s in role.revert(host, Context())]}}
        print(json.dumps(out))
        """)
    p = run([sys.executable, "-c", script], with_sysctl)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["w1"]["file"] == "/etc/sysctl.d/90-specfleet.conf"
    lines = [ln for ln in out["w1"]["content"].splitlines() if not ln.startswith("#")]
    assert lines == ["net.core.somaxconn = 4096", "vm.max_map_count = 262144"], out["w1"]["content"]
    assert out["w1"]["content"].startswith("# written by specfleet"), out["w1"]["content"]  # the {# path #} line renders nothing
    assert "vm.max_map_count = 262144" in out["w2"]["content"]  # the default its vars model declares
    assert out["w1"]["revert"] == ["FileContent"]


def test_a_bad_value_of_the_roles_own_vars_stops_provision_before_any_host(with_sysctl, tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(textwrap.dedent("""\
        all: {user: root, connect_timeout: 1}
        hosts:
          w1: {address: 127.0.0.1, port: 1, vars: {sysctl_settings: {vm.max_map_count: lots}}}
        """))
    p = run([FAB, "provision", "--only", "sysctl", "--inventory", str(inv)], with_sysctl)
    assert p.returncode == 1, p.stdout + p.stderr
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1, p.stderr
    assert str(inv) in err[0] and "'w1'" in err[0] and "sysctl_settings.vm.max_map_count" in err[0], err[0]
    assert "unreachable" not in p.stdout  # no connection was tried


def test_the_fact_parses_its_fixture(tmp_path):
    """"Add a fact": the page's fact, written into a copy of the package, turns the page's fixture into its value."""
    if not (ROOT / "specfleet" / "facts" / "base.py").exists():
        pytest.skip("specfleet/facts (typed facts, branch h-facts) is not in this tree yet: the page follows its interface")
    files = page_files("add-a-fact.md")
    assert set(files) == {"specfleet/facts/sysctl.py"}, files
    fixture = re.search(r"^```json\n(.*?)^```$", (DEV / "add-a-fact.md").read_text(), re.S | re.M)[1]
    copy = project_copy(tmp_path, files)
    script = textwrap.dedent(f"""\
        import json, subprocess
        from specfleet.facts.base import from_json
        from specfleet.facts.sysctl import SysctlValue
        case = json.loads({fixture!r})
        fact = SysctlValue(**case["args"])
        assert subprocess.run(["bash", "-n", "-c", fact.command()]).returncode == 0
        got = fact.parse(case["output"], case["rc"])
        assert got == from_json(SysctlValue.value_type(), case["value"]), got
        assert fact.parse("@absent\\n", 0) is None
        assert "'vm.x; rm -rf /'" in SysctlValue("vm.x; rm -rf /").command()  # the argument is quoted
        print("ok")
        """)
    p = run([sys.executable, "-c", script], copy)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


GUIDE_EDIT = re.compile(r"<!-- dev-guide: (?P<target>\S+)(?: after (?P<after>\S+))? -->\n```python\n(?P<code>.*?)```",
                        re.S)


def guide_edits(page: str) -> list[tuple[str, str | None, object]]:
    """(module.NAME, after column or None, the entry as a Python value) for each marked block."""
    import ast

    def value(code: str):
        code = code.strip().rstrip(",")
        if code.startswith("("):
            return ast.literal_eval(code)
        (item,) = ast.literal_eval("{" + code + "}").items()  # a dict entry: (key, value)
        return item
    return [(m["target"], m["after"], value(m["code"])) for m in GUIDE_EDIT.finditer((DEV / page).read_text())]


def test_the_report_column_appears_in_the_report(tmp_path, monkeypatch):
    """"Add a report column": the page's two entries, and nothing else, put req/s in report.md."""
    import importlib
    sys.path.insert(0, str(ROOT / "tests" / "report"))
    from campaign_builder import write_campaign
    from specfleet.report import report_campaign
    edits = guide_edits("add-a-report-column.md")
    assert [t for t, _, _ in edits] == ["specfleet.report.tables.merge.RUN_METRICS", "specfleet.report.render.document.RUN_COLS"]
    for target, after, entry in edits:
        mod, _, name = target.rpartition(".")
        current = getattr(importlib.import_module(mod), name)
        if isinstance(current, dict):
            monkeypatch.setitem(current, *entry)
        else:
            at = [c[0] for c in current].index(after) + 1
            monkeypatch.setattr(importlib.import_module(mod), name, current[:at] + [entry] + current[at:])
    root = write_campaign(tmp_path / "results" / "c1")
    out = report_campaign(root, quiet=True)
    assert out.merged
    files = {json.loads(p.read_text())["request_throughput"] for p in root.glob("w2/eagle3_conc16.json")}
    md = (root / "report.md").read_text()
    header = next(ln for ln in md.splitlines() if ln.startswith("| config | node |"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols[cols.index("total tok/s") + 1] == "req/s", header
    row = next(ln for ln in md.splitlines() if ln.startswith("| eagle3 | w2 |") and "562.6" in ln)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[cols.index("req/s")] == f"{files.pop():.3f}", row


GUIDE_INSERT = re.compile(r'<!-- dev-guide-insert: (?P<file>\S+) after "(?P<anchor>(?:[^"\\]|\\.)*)" -->\n'
                          r"```python\n(?P<code>.*?)```", re.S)


def insert_edits(copy: Path, page: str) -> int:
    """Insert each marked block after the line it names; the anchor must be in the file exactly once."""
    n = 0
    for m in GUIDE_INSERT.finditer((DEV / page).read_text()):
        anchor = m["anchor"].replace('\\"', '"')
        f = copy / m["file"]
        text = f.read_text()
        assert text.count(anchor + "\n") == 1, f"{page}: the line {anchor!r} is not once in {m['file']}: update the page"
        f.write_text(text.replace(anchor + "\n", anchor + "\n" + m["code"], 1))
        n += 1
    return n


def test_the_bench_flag_reaches_the_workers_command(tmp_path):
    """"Add a bench flag": the page's four insertions make a plan's request_rate a --request-rate word."""
    copy = project_copy(tmp_path, {})
    assert insert_edits(copy, "add-a-bench-flag.md") == 4
    plan_yaml = re.search(r"^```yaml\n(.*?)^```$", (DEV / "add-a-bench-flag.md").read_text(), re.S | re.M)[1]
    rate = __import__("yaml").safe_load(plan_yaml)["benchmark"]["request_rate"]
    script = textwrap.dedent(f"""\
        import shlex, yaml
        from pathlib import Path
        from specfleet.campaign.commands import Paths, commands_for
        from specfleet.plan import PlanError, load_plan
        src = yaml.safe_load(Path({str(ROOT / 'plans/qwen3-32b.yml')!r}).read_text())
        src["benchmark"]["dataset_path"] = {str(ROOT / 'datasets/sample/question.jsonl')!r}
        out = []
        for rate in ({rate!r}, None, -1):
            b = dict(src["benchmark"])
            if rate is not None:
                b["request_rate"] = rate
            f = Path({str(tmp_path)!r}) / f"plan{{rate}}.yml"
            f.write_text(yaml.safe_dump({{**src, "benchmark": b}}))
            try:
                p = load_plan(f)
            except PlanError as e:
                out.append("error: " + str(e).splitlines()[0])
                continue
            item = p.configurations[0].name
            words = [w for ln in commands_for(p, "w1", item, Paths(venv="/v", work_dir="/w")) for w in shlex.split(ln)]
            out.append(" ".join(words[words.index("--request-rate"):][:2]) if "--request-rate" in words else "absent")
        print("\\n".join(out))
        """)
    p = run([sys.executable, "-c", script], copy)
    assert p.returncode == 0, p.stderr
    with_rate, without, bad = p.stdout.strip().splitlines()
    assert with_rate == f"--request-rate {rate}"
    assert without == "absent"  # null: not sent, vLLM's default applies
    assert bad.startswith("error: ") and "request_rate" in bad, bad
