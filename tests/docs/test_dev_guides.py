"""The docs/dev how-tos stay true: their code is taken from the pages and run.

"Add a role": the page's module and template are written into a temporary copy of the package;
with no other edit, the role is in `fab --help provision`, `--only` and `--revert`, its steps
render the template, and a bad value of its own vars is one error line naming file, host and field.
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
BLOCK = re.compile(r"^```(?:python|jinja)\n(?:# |\{# )(?P<path>specfleet/\S+?)(?: #\})?\n(?P<body>.*?)^```$",
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
    shutil.copytree(ROOT / "specfleet", dst / "specfleet", ignore=shutil.ignore_patterns("__pycache__"))
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
    assert set(files) == {"specfleet/roles/sysctl.py", "specfleet/templates/provision/sysctl.conf.j2"}, files
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
        from specfleet.roles import Context, get
        inv = load_inventory({str(inv)!r})
        role = get("sysctl")
        out = {{}}
        for name, host in inv.hosts.items():
            role.check(host, str(inv.path))
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
    assert "vm.max_map_count = 262144" in out["w2"]["content"]  # the module's default
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
