"""fab provision under Slurm, the bastion's half (specfleet/slurm/site_check.py): each node's probes are
the batch gather sends over SSH, run here by the local bash as the node's job step runs them, and the
verdict is check mode's: a change or a failed check fails the node, nothing is applied."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console

from specfleet.scheduler import SlurmScheduler
from specfleet.slurm.dispatch import place_programs, without_failed_site_check
from specfleet.slurm.script import VERDICT, site_check_dir
from specfleet.slurm.site_check import batch_of, verdict
from specfleet.steps.command import Assert
from specfleet.steps.files import FileContent


TOKEN = "0123456789ab"


def run_on_node(steps) -> str:
    script, _root = batch_of(steps, TOKEN)
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout


def test_a_node_as_the_site_left_it_passes(tmp_path):
    (tmp_path / "modules.conf").write_text("nvidia\n")
    steps = [FileContent(str(tmp_path / "modules.conf"), "nvidia\n"), Assert("venv", f"test -d {tmp_path}", "no venv")]
    assert verdict(steps, run_on_node(steps), TOKEN) == []


def test_what_would_change_or_fails_a_check_is_named_and_nothing_is_changed(tmp_path):
    conf = tmp_path / "modules.conf"
    steps = [FileContent(str(conf), "nvidia\n"), Assert("venv on the node", f"test -x {tmp_path}/venv/bin/python",
                                                         "the venv is not on this node")]
    why = verdict(steps, run_on_node(steps), TOKEN)
    assert len(why) == 2 and why[0].startswith(f"file {conf}: would change (create {conf})"), why
    assert "the site owns it, specfleet does not change it under Slurm" in why[0]
    assert why[1].startswith("venv on the node: the venv is not on this node")
    assert not conf.exists()  # check mode: decided, never applied


def test_a_node_whose_output_never_came_fails_every_step():
    steps = [Assert("venv on the node", "true", "no venv")]
    assert verdict(steps, "", TOKEN) and batch_of([], TOKEN) is None   # no probes: nothing to run on the node


def test_the_node_step_runs_its_own_script_and_writes_its_output(tmp_path, monkeypatch):
    """The step runs from the one runner.pyz the bastion places (dispatch.place_programs): no second
    program travels."""
    steps = [Assert("ok", "true", "never")]
    script, root = batch_of(steps, TOKEN)
    (tmp_path / "scripts.json").write_text(json.dumps({"w7": {"script": script, "root": False}}))
    place_programs(str(tmp_path))
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["runner.pyz"]
    step = [sys.executable, "-S", str(tmp_path / "bin" / "runner.pyz"), "slurm-step", "site-check"]
    env = {"SLURMD_NODENAME": "w7", "SLURM_JOB_ID": "42", "PATH": "/usr/bin:/bin"}
    p = subprocess.run([*step, "--dir", str(tmp_path)], env=env, capture_output=True, text=True, cwd="/")
    assert p.returncode == 0, p.stderr
    got = json.loads((tmp_path / "out" / "w7.json").read_text())
    assert (got["node"], got["job_id"], got["rc"]) == ("w7", "42", 0)
    assert verdict(steps, got["stdout"], TOKEN) == []
    env["SLURMD_NODENAME"] = "w8"  # a node the bastion wrote no script for
    p = subprocess.run([*step, "--dir", str(tmp_path)], env=env, capture_output=True, text=True, cwd="/")
    assert p.returncode == 2 and "node w8 has no site check" in p.stderr


def test_fab_bench_reads_the_verdict_file_as_written_and_ignores_one_it_did_not_write(tmp_path):
    """dispatch.without_failed_site_check: a node the last site check failed is left out, named on the
    terminal; a verdict that is absent, not JSON or of another shape leaves every node in."""
    cfg = SlurmScheduler(kind="slurm", partition="gpu", time_limit="01:00:00", shared_dir=str(tmp_path))
    hosts = [SimpleNamespace(name="w1"), SimpleNamespace(name="w2")]
    inv = SimpleNamespace(path="inventory.yml")
    path = Path(site_check_dir(cfg)) / VERDICT

    def kept(text: str | None) -> tuple[list[str], str]:
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(text)
        console = Console(file=io.StringIO(), width=200)
        names = [h.name for h in without_failed_site_check(inv, cfg, None, hosts, console)]
        return names, console.file.getvalue()

    names, said = kept(json.dumps({"job_id": "7", "failed": {"w2": "no venv on the node"}}))
    assert names == ["w1"] and "node w2 left out: it failed the site check" in said and "no venv" in said
    for other in (None, "", "{half", "null", "[1, 2]", '{"failed": ["w2"]}', '{"failed": null}', '{"job_id": 7}',
                  '{"failed": 5}', '{"failed": [["w2", "why"]]}'):
        assert kept(other) == (["w1", "w2"], ""), other
