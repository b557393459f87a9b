"""The dataset rule: a path is a bastion file (relative to the plan file), placed on workers by
content hash; a file already on the workers is spelled {on_worker: /path}. docs/campaign.md."""
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specfleet.roles import configs
from specfleet.plan import PlanError, load_plan
from specfleet.inventory import Host, declared_defaults
from specfleet.roles import vars_model

from specfleet.backend.ssh import paths_for, worker_dataset

PROJECT = Path(__file__).resolve().parents[2]
FAB = str(Path(sys.executable).parent / "fab")


def plan_text(dataset: str) -> str:
    return textwrap.dedent(f"""\
        campaign: t
        model: {{name: m, candidates: [/m/a], weights_gib: 1}}
        configurations:
          - {{name: vanilla, speculative_config: null}}
        baseline: vanilla
        benchmark: {{dataset_path: {dataset}, chat_template: double, concurrencies: [16]}}
        """)


def write_plan(where: Path, dataset: str) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    f = where / "p.yml"
    f.write_text(plan_text(dataset))
    return f


def host(name="w1", **vars) -> Host:
    return Host(name=name, address="10.0.0.1", user="root", port=22, key=None, known_hosts="/dev/null",
                become=False, connect_timeout=5, command_timeout=60, groups=(),
                vars={**declared_defaults(vars_model()), "venv_path": "/v", **vars})  # the defaults, as loaded


def test_relative_path_is_relative_to_the_plan_file_not_the_cwd(tmp_path, monkeypatch):
    data = tmp_path / "data" / "question.jsonl"
    data.parent.mkdir()
    data.write_text('{"turns": ["hi"]}\n')
    plan = write_plan(tmp_path / "plans", "../data/question.jsonl")
    monkeypatch.chdir("/")
    p = load_plan(plan)
    assert p.dataset_file().resolve() == data
    # absolute paths too; the plan's own folder is irrelevant then
    assert load_plan(write_plan(tmp_path / "other", str(data))).dataset_file() == data


def test_missing_bastion_file_is_one_line_naming_plan_and_field(tmp_path):
    plan = write_plan(tmp_path / "plans", "../nope/question.jsonl")
    p = load_plan(plan)  # loading alone does not need the file (fab collect, fab status)
    with pytest.raises(PlanError) as e:
        p.dataset_file()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{plan}: field 'benchmark.dataset_path': ")
    assert str(tmp_path / "nope" / "question.jsonl") in msg and "does not exist on the bastion" in msg


def test_on_worker_is_not_a_bastion_file(tmp_path):
    p = load_plan(write_plan(tmp_path, "{on_worker: /home/u/datasets/question.jsonl}"))
    assert p.dataset_file() is None and p.benchmark.on_worker == "/home/u/datasets/question.jsonl"
    assert worker_dataset(host(), p) == "/home/u/datasets/question.jsonl"


@pytest.mark.parametrize("bad, says", [
    ("{on_worker: data/q.jsonl}", "is not an absolute path"),
    ("{on_worker: /d/q.jsonl, also: 1}", "on_worker"),
    ("{path: /d/q.jsonl}", "on_worker"),
    ("''", "a file on the bastion"),
    ("5", "a file on the bastion"),
])
def test_bad_dataset_spelling_is_refused(tmp_path, bad, says):
    with pytest.raises(PlanError) as e:
        load_plan(write_plan(tmp_path, bad))
    assert "benchmark.dataset_path" in str(e.value) and says in str(e.value)


def test_the_reports_plan_reads_its_dataset_on_the_worker():
    p = load_plan(PROJECT / "plans/qwen3-32b.yml")
    assert p.benchmark.on_worker == "/home/maymust/datasets/question.jsonl" and p.dataset_file() is None
    argv = paths_for(host(), p)
    assert argv.dataset == "/home/maymust/datasets/question.jsonl"


def test_placement_by_content_never_collides_and_dedups(tmp_path):
    a = tmp_path / "a" / "question.jsonl"
    b = tmp_path / "b" / "question.jsonl"
    same = tmp_path / "c" / "question.jsonl"
    for f, text in ((a, "A\n"), (b, "B\n"), (same, "A\n")):
        f.parent.mkdir()
        f.write_text(text)
    h = host(specfleet_home="/srv/sf")
    pa, pb, ps = (configs.dataset_path(h, f) for f in (a, b, same))
    assert re.fullmatch(r"/srv/sf/datasets/[0-9a-f]{16}/question\.jsonl", pa)
    assert pa != pb and pa == ps
    # the plan's commands carry the placed path
    p = load_plan(write_plan(tmp_path / "plans", "../b/question.jsonl"))
    assert paths_for(h, p).dataset == pb
    b.write_text("B, changed\n")
    assert configs.dataset_path(h, b) != pb  # a changed file is a new path: its items are redone


def test_fab_bench_check_with_a_missing_dataset_exits_1_before_any_host(tmp_path):
    plan = write_plan(tmp_path / "plans", "../missing.jsonl")
    inv = tmp_path / "inv.yml"  # a host that does not exist: it must never be contacted
    inv.write_text("all: {user: root, connect_timeout: 1}\nhosts: {w1: {address: 192.0.2.1}}\n")
    for extra in (["--check"], []):
        p = subprocess.run([FAB, "bench", "--plan", str(plan), "--inventory", str(inv), *extra], cwd=PROJECT,
                           env={**os.environ, "SPECFLEET_RUNS_DIR": str(tmp_path / "runs")},
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 1, p.stdout + p.stderr
        lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
        assert lines == [f"error: {plan}: field 'benchmark.dataset_path': {tmp_path / 'missing.jsonl'} does not "
                         "exist on the bastion (a relative path is relative to the plan file; a file already "
                         "on the workers is written {on_worker: /path})"]


def test_fab_provision_with_a_missing_inventory_dataset_exits_1(tmp_path):
    inv = tmp_path / "inventory" / "inv.yml"
    inv.parent.mkdir()
    inv.write_text("all: {user: root, connect_timeout: 1}\nbastion: {vars: {datasets: [../d/q.jsonl]}}\n"
                   "hosts: {w1: {address: 192.0.2.1}}\n")
    p = subprocess.run([FAB, "provision", "--only", "configs", "--check", "--inventory", str(inv)], cwd=PROJECT,
                       env={**os.environ, "SPECFLEET_RUNS_DIR": str(tmp_path / "runs")},
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"error: {inv}: bastion, field 'datasets' (entry 1): {tmp_path / 'd' / 'q.jsonl'} is not a readable " \
           "file on the bastion" in p.stderr
