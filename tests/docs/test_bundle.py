"""`fab bundle` builds an archive that installs specfleet on a bastion with no package index.

Builds the bundle as docs/bastion.md prints it (`--python-version X.Y --platform manylinux_2_N_ARCH`),
for the running Python and this machine's glibc, installs it into a fresh venv with the bundle's
install.sh inside a network namespace with no route out (`unshare --net`; pip --no-index --find-links
wheelhouse; the machine's pip config and its local mirrors are switched off, so only the bundle's wheels
can be used), and runs `fab --list` from the bundle's directory, which holds fabfile.py (docs/bastion.md
says to run fab there). Then, from that install and a namespace whose only link is the testbed's
management net, a short campaign of the bundle's own plans/demo.yml on the testbed (facts, provision,
bench, collect). Needs the package index: NEEDS_NETWORK in tests/sharding.py.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from e2e_helpers import fab as repo_fab, inventory_of

ROOT = Path(__file__).resolve().parents[2]
FAB = str(Path(sys.executable).parent / "fab")
PYVER = f"{sys.version_info[0]}.{sys.version_info[1]}"


def offline_env() -> dict:
    """No pip configuration, no index, no extra find-links: the wheelhouse is all there is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "VIRTUAL_ENV"}
    env.update(PIP_CONFIG_FILE="/dev/null", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def platform_tag() -> str:
    """This machine's tag in docs/bastion.md's form: manylinux_2_<glibc minor>_<arch>."""
    libc, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    assert libc == "glibc", libc
    return f"manylinux_2_{version.split('.')[1]}_{platform.machine()}"


def no_network() -> list[str]:
    """A prefix that runs a command in a network namespace of its own (only `lo`, down): needs root."""
    return ["unshare", "--net"] if os.geteuid() == 0 else []


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    tag = platform_tag()
    p = subprocess.run([FAB, "bundle", "--python-version", PYVER, "--platform", tag, "--output", str(out),
                        "--no-handbook"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    archives = list(out.glob(f"specfleet-bundle-*-py{PYVER}-{tag}.tar.gz"))
    assert len(archives) == 1, list(out.iterdir())
    where = tmp_path_factory.mktemp("bastion")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(where)  # our own archive, just built
    top = next(where.iterdir())
    base = getattr(sys, "_base_executable", sys.executable)
    p = subprocess.run(no_network() + [str(top / "install.sh")], cwd=top, env={**offline_env(), "PYTHON": base},
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


def test_only_the_repositorys_files_are_shipped(installed):
    tracked = set(subprocess.run(["git", "-C", str(ROOT), "ls-files", "plans", "datasets/sample"], capture_output=True,
                                 text=True, check=True).stdout.split())
    packed = {str(f.relative_to(installed)) for d in ("plans", "datasets/sample") for f in (installed / d).rglob("*")
              if f.is_file()}
    assert packed == tracked, packed ^ tracked


def test_fab_list_from_the_offline_install(installed):
    env = {**offline_env(), "COLUMNS": "120"}
    p = subprocess.run(no_network() + [str(installed / ".venv/bin/fab"), "--list"], cwd=installed, env=env,
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


OFFLINE_NS = "sfoffline-bastion"   # not sf-*: the testbed's `up` refuses while any sf-* namespace exists
OFFLINE_IP = "10.10.30.250/24"     # on the testbed's management net, above its 64 workers (.14-.77)


@pytest.fixture
def offline_bastion():
    """`attach()` -> a command prefix that runs in a network namespace whose only link is a veth on the
    testbed's management bridge (call it once the testbed is up): no default route, no route out. Made
    here and deleted afterwards (its end of the veth goes with it)."""
    if os.geteuid() != 0:
        pytest.skip("a network namespace needs root")

    def attach() -> list[str]:
        for argv in (["ip", "netns", "add", OFFLINE_NS],
                     ["ip", "link", "add", "sfoff-b", "type", "veth", "peer", "name", "sfoff-n", "netns", OFFLINE_NS],
                     ["ip", "link", "set", "sfoff-b", "master", "sf-br-mgmt", "up"],
                     ["ip", "-n", OFFLINE_NS, "addr", "add", OFFLINE_IP, "dev", "sfoff-n"],
                     ["ip", "-n", OFFLINE_NS, "link", "set", "sfoff-n", "up"],
                     ["ip", "-n", OFFLINE_NS, "link", "set", "lo", "up"]):
            p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            assert p.returncode == 0, (argv, p.stderr)
        return ["ip", "netns", "exec", OFFLINE_NS]
    try:
        yield attach
    finally:
        subprocess.run(["ip", "netns", "del", OFFLINE_NS], capture_output=True, timeout=30)


def test_a_campaign_from_the_offline_install(installed, testbed_factory, offline_bastion, tmp_path):
    """The bundle's fab, in a namespace that reaches only the testbed's workers: facts, provision (the
    workers' venv built beforehand on the bastion, as the bastion chapter has it carried in), a short bench
    of the bundle's own plans/demo.yml, collect: each exits 0 and every planned cell is merged."""
    tb = testbed_factory(workers=2)
    offline = offline_bastion()
    routes = subprocess.run(offline + ["ip", "route"], capture_output=True, text=True, check=True).stdout
    assert "default" not in routes and routes.strip().startswith("10.10.30.0/24"), routes
    # the workers' venv (the simulated engine here; vLLM's wheels in the field) is built on the bastion
    # with the package index, as docs/bastion.md has its wheels carried in; the offline provision finds it built
    p = repo_fab("provision", "--only", "venv", inventory=inventory_of(tb), runs=tmp_path / "runs-online")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    plan = yaml.safe_load((installed / "plans/demo.yml").read_text())
    plan["benchmark"].update(num_prompts=4, output_len=64, repeat=1, min_prompts_per_concurrency=0)
    plan["configurations"] = [c for c in plan["configurations"] if c["name"] in ("vanilla", "eagle3")]
    plan["server"]["health_poll_s"] = 0.5
    (installed / "plans/demo-short.yml").write_text(yaml.safe_dump(plan, sort_keys=False))
    env = {**offline_env(), "COLUMNS": "200", "SPECFLEET_INVENTORY": str(inventory_of(tb))}

    def offline_fab(*args):
        p = subprocess.run(offline + [str(installed / ".venv/bin/fab"), *args], cwd=installed, env=env,
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, (args, p.stdout[-3000:] + p.stderr[-2000:])
        return p

    offline_fab("facts")
    offline_fab("provision")
    offline_fab("bench", "--hosts", "w1,w2", "--plan", "plans/demo-short.yml", "--poll", "0.5")
    offline_fab("collect", "--plan", "plans/demo-short.yml")
    camp = installed / "results" / plan["campaign"]
    rows = json.loads((camp / "merged.json").read_text())
    # every planned cell merged: vanilla on both nodes (the gate's baseline), eagle3 on one, at c=1 and 16
    cells = {(r["config"], int(r["concurrency"])) for r in rows}
    assert cells == {(c, n) for c in ("vanilla", "eagle3") for n in (1, 16)}, cells
    assert {r["node"] for r in rows if r["config"] == "vanilla"} == {"w1", "w2"}, rows
    assert "INCOMPLETE" not in (camp / "report.md").read_text()
