"""After a job, the nodes whose queue did not finish are named by their Slurm node names, with the
`fab bench --exclude` that runs the campaign again without them (read from state.json on the shared path)."""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from specfleet.scheduler import SlurmScheduler
from specfleet.slurm.dispatch import exclude_hint, failed_nodes
from specfleet.slurm.script import node_work_dir
from specfleet.errors import UserError
from specfleet.tasks.common import chosen_hosts, load, without
from specfleet.worker import layout


def test_unfinished_and_never_started_nodes_are_named_with_why(tmp_path):
    cfg = SlurmScheduler(kind="slurm", partition="gpu", time_limit="10", shared_dir=str(tmp_path))
    plan = SimpleNamespace(campaign="c", file=Path("plans/my plan.yml"))
    states = {"n1": {"status": "done", "items": [{"name": "vanilla", "status": "done"}]},
              "n2": {"status": "failed", "items": [{"name": "vanilla", "status": "done"},
                                                   {"name": "ngram", "status": "failed", "error": "GPU busy"}]},
              "n3": None}
    for node, st in states.items():
        rdir = Path(layout.run_dir(node_work_dir(cfg, "c", node), "c", node))
        rdir.mkdir(parents=True)
        if st:
            (rdir / layout.STATE).write_text(json.dumps(st))
    hosts = [SimpleNamespace(name=n) for n in states]
    failed = failed_nodes(cfg, plan, hosts)
    assert failed == {"n2": "runner failed, ngram: GPU busy",
                      "n3": "its runner never started (the job's output, slurm-<job>.out, says why)"}
    hint = exclude_hint(plan, list(failed))
    assert hint.startswith("re-run without them: ")
    assert shlex.split(hint.split(": ", 1)[1]) == ["fab", "bench", "--plan", "plans/my plan.yml", "--exclude", "n2,n3"]


def test_a_state_json_without_items_or_hostile_on_the_shared_path_is_named_not_a_crash(tmp_path):
    """Under Slurm as over SSH: a state.json without items or a nesting bomb (KeyError / RecursionError,
    exit 70) names the node and the file; a bomb in any JSON file read on the shared path reads as absent."""
    from specfleet.slurm.dispatch import read_json
    cfg = SlurmScheduler(kind="slurm", partition="gpu", time_limit="10", shared_dir=str(tmp_path))
    plan = SimpleNamespace(campaign="c", file=Path("plans/p.yml"))
    texts = {"n1": '{"status": "failed"}', "n2": "[" * 100_000 + "]" * 100_000}
    for node, text in texts.items():
        rdir = Path(layout.run_dir(node_work_dir(cfg, "c", node), "c", node))
        rdir.mkdir(parents=True)
        (rdir / layout.STATE).write_text(text)
    failed = failed_nodes(cfg, plan, [SimpleNamespace(name=n) for n in texts])
    assert failed["n1"] == "state.json: no items: not read"
    assert failed["n2"].startswith("state.json: JSON nested 100000 levels deep")
    bomb = tmp_path / "n.json"
    bomb.write_text("[" * 100_000 + "]" * 100_000)
    assert read_json(str(bomb)) is None


def test_exclude_leaves_the_named_hosts_out_of_the_selection(tmp_path):
    f = tmp_path / "inv.yml"
    f.write_text(yaml.safe_dump({"hosts": {n: {"address": f"10.0.0.{k}"} for k, n in enumerate(("w1", "w2", "w3"), 1)},
                                 "groups": {"workers": {"hosts": ["w1", "w2"]}, "spare": {"hosts": ["w3"]}}}))
    inv = load(str(f))

    def without_(hosts, exclude):
        return ",".join(h.name for h in without(inv, chosen_hosts(inv, hosts), exclude, hosts))
    assert without_(None, "w2") == "w1"            # the default selection is the workers group
    assert without_("workers,spare", "w1") == "w2,w3"
    assert without_("all", "spare") == "w1,w2"     # a group name excludes its hosts
    with pytest.raises(UserError) as e:
        without_(None, "workers")
    assert "leaves no host" in str(e.value)
    with pytest.raises(UserError) as e:
        without_(None, "w9")
    assert "--exclude names 'w9'" in str(e.value) and str(f) in str(e.value)
