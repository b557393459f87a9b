"""Files of any size placed on real sshd workers: the payload streams over the channel's stdin.

The real Spec-Bench file (698 KB) and a generated 50 MB file, as root and as a non-root login
through `sudo -n`; each placed twice (the second run changes nothing). What is on a worker is
read back without SSH (nsenter), by checksum.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

from specfleet.exits import EXIT_FAILED
from specfleet.fleet import Fleet
from specfleet.inventory import load_inventory
from specfleet.step import Status
from specfleet.steps.files import FileContent

from e2e_helpers import PROJECT, derived_inventory, events, fab, host_sh, inventory_of
from test_privilege import add_user, as_user
from tests.shared_data import SPEC_BENCH

pytestmark = pytest.mark.e2e
FAST = PROJECT / "tests/e2e/plans/fast.yml"


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> Path:
    f = tmp_path_factory.mktemp("payload") / "big.bin"
    with open(f, "wb") as out:
        for _ in range(50):
            out.write(os.urandom(1 << 20))
    return f


def spec_bench() -> Path:
    if not SPEC_BENCH.is_file():
        pytest.skip(f"{SPEC_BENCH} is absent (the real 698 KB Spec-Bench file)")
    return SPEC_BENCH


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def play(inv_path: Path, steps_for, **kw) -> Fleet:
    fleet = Fleet(list(load_inventory(inv_path).hosts.values()), **kw)
    try:
        fleet.play(steps_for)
    finally:
        fleet.close()
    return fleet


def remote_sha(tb, host: str, path: str) -> str:
    return host_sh(tb, host, f"sha256sum < {path} | cut -c1-64").stdout.strip()


def test_real_dataset_and_fifty_megabytes_twice(testbed_factory, big_file):
    real = spec_bench()
    tb = testbed_factory(workers=2)
    inv = inventory_of(tb)

    def steps(h):
        return [FileContent("/var/lib/specfleet/datasets/t/question.jsonl", source=real),
                FileContent("/var/lib/specfleet/big.bin", source=big_file, mode="0600"),
                FileContent("/etc/specfleet-test.conf", "a\nb\n")]
    first = play(inv, steps)
    assert first.exit_code() == 0, [(r.host, r.step, r.message) for r in first.results]
    assert sorted(r.status for r in first.results) == [Status.CHANGED] * 6
    for w in ("w1", "w2"):
        assert remote_sha(tb, w, "/var/lib/specfleet/datasets/t/question.jsonl") == sha(real)
        assert remote_sha(tb, w, "/var/lib/specfleet/big.bin") == sha(big_file)
        assert host_sh(tb, w, "stat -c %a /var/lib/specfleet/big.bin").stdout.strip() == "600"
        # no temp file left beside them
        assert host_sh(tb, w, "ls -A /var/lib/specfleet/datasets/t").stdout.split() == ["question.jsonl"]
    second = play(inv, steps)
    assert [r.status for r in second.results] == [Status.OK] * 6
    # --diff: a small text file shows its lines, a large one its checksums (content never fetched)
    host_sh(tb, "w1", "echo extra >> /var/lib/specfleet/datasets/t/question.jsonl; echo c >> /etc/specfleet-test.conf")
    changed = remote_sha(tb, "w1", "/var/lib/specfleet/datasets/t/question.jsonl")
    diffs = {r.step: r.changes[0].diff for r in play(inv, steps, check=True, diff=True).results
             if r.host == "w1" and r.changes}
    assert diffs["file /var/lib/specfleet/datasets/t/question.jsonl"] == \
        f"binary or large file: sha256 {changed} -> {sha(real)}"
    assert "-c" in diffs["file /etc/specfleet-test.conf"].splitlines()
    assert len(diffs) == 2


def test_non_root_login_through_sudo(testbed_factory, tmp_path):
    real = spec_bench()
    tb = testbed_factory(workers=1)
    add_user(tb, "w1", sudo=True)
    inv = as_user(tb, tmp_path)

    def steps(h):
        return [FileContent("/etc/specfleet-test/question.jsonl", source=real)]
    first = play(inv, steps)
    assert [r.status for r in first.results] == [Status.CHANGED], first.results
    assert remote_sha(tb, "w1", "/etc/specfleet-test/question.jsonl") == sha(real)
    assert host_sh(tb, "w1", "stat -c %U /etc/specfleet-test/question.jsonl").stdout.strip() == "root"
    assert [r.status for r in play(inv, steps).results] == [Status.OK]


def test_a_refused_payload_fails_that_host_only(testbed_factory, big_file):
    """The receiving side stops reading at once (its directory cannot be made): a clear failure."""
    tb = testbed_factory(workers=2)
    assert host_sh(tb, "w1", "mkdir -p /opt/sf && echo x > /opt/sf/notadir").returncode == 0

    def steps(h):
        parent = "/opt/sf/notadir" if h.name == "w1" else "/opt/sf"
        return [FileContent(f"{parent}/big.bin", source=big_file)]
    fleet = play(inventory_of(tb), steps)
    by_host = {r.host: r for r in fleet.results}
    assert fleet.exit_code() == EXIT_FAILED
    assert by_host["w1"].status is Status.FAILED and "cannot create directory" in by_host["w1"].message
    assert by_host["w2"].status is Status.CHANGED
    assert remote_sha(tb, "w2", "/opt/sf/big.bin") == sha(big_file)


# ------------------------------------------------------------ datasets (docs/campaign.md)
SAMPLE = PROJECT / "datasets/sample/question.jsonl"
HOME = "/var/lib/specfleet"


def placed(tb, host: str) -> dict[str, str]:
    """{path under <home>/datasets: sha256} of every file there."""
    out = host_sh(tb, host, f"cd {HOME}/datasets && find . -type f -exec sha256sum {{}} +").stdout
    return {line.split()[1][2:]: line.split()[0] for line in out.splitlines()}


def test_two_datasets_called_question_jsonl_never_collide(testbed_factory, tmp_path):
    """provision places the inventory's datasets and bench the plan's: by content, each once."""
    real = spec_bench()
    tb = testbed_factory(workers=1)

    def edit(doc):
        doc["bastion"]["vars"]["datasets"] = [str(SAMPLE)]
    inv = derived_inventory(tb, tmp_path, edit)
    first = fab("provision", inventory=inv, runs=tmp_path / "r1")  # all roles: bench needs the venv and env
    assert first.returncode == 0, first.stdout[-3000:]
    again = fab("provision", "--only", "configs", inventory=inv, runs=tmp_path / "r2")
    assert again.returncode == 0 and not [e for e in events(tmp_path / "r2") if e.get("changed")]
    plan = plan_on(tmp_path, str(real))
    out = fab("bench", "--hosts", "w1", "--plan", str(plan), "--poll", "0.5", inventory=inv, runs=tmp_path / "r3")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert placed(tb, "w1") == {f"{sha(SAMPLE)[:16]}/question.jsonl": sha(SAMPLE),
                                f"{sha(real)[:16]}/question.jsonl": sha(real)}
    # the runner read the real file: its path is in the result's command and the result parsed
    res = host_sh(tb, "w1", f"cat {HOME}/campaigns/payload-e2e/w1/vanilla_conc1.json").stdout
    assert json.loads(res)["completed"] == 2
    spec = json.loads(host_sh(tb, "w1", f"cat {HOME}/campaigns/payload-e2e/w1/run.json").stdout)
    assert spec["items"][0]["client"]["dataset_path"] == f"{HOME}/datasets/{sha(real)[:16]}/question.jsonl"


def test_on_worker_dataset_is_checked_on_each_worker_in_check_mode(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    # the content goes over stdin: the worker's /tmp is private, so a checkout under /tmp is not there
    put = tb.exec("w1", "mkdir -p /opt/data && cat > /opt/data/q.jsonl", input=SAMPLE.read_text())
    assert put.returncode == 0, put.stderr
    plan = plan_on(tmp_path, {"on_worker": "/opt/data/q.jsonl"})
    out = fab("bench", "--check", "--plan", str(plan), inventory=inventory_of(tb), runs=tmp_path / "r")
    assert out.returncode == EXIT_FAILED, out.stdout[-3000:]
    recs = {(e["host"], e["status"]): e for e in events(tmp_path / "r") if e.get("event") == "step"}
    assert ("w1", "ok") in recs
    assert recs[("w2", "failed")]["message"] == \
        f"{plan}: field 'benchmark.dataset_path': /opt/data/q.jsonl is not a readable file on w2 " \
        "(put it there, or name a bastion file, which fab bench places on every worker)"
    assert host_sh(tb, "w2", f"ls {HOME}/campaigns 2>/dev/null").stdout == ""  # check mode: nothing made


def plan_on(tmp_path: Path, dataset) -> Path:
    """tests/e2e/plans/fast.yml made tiny (vanilla only, 2 prompts, concurrency 1), with this dataset."""
    doc = yaml.safe_load(FAST.read_text())
    doc["campaign"] = "payload-e2e"
    doc["configurations"] = [c for c in doc["configurations"] if c["name"] == "vanilla"]
    doc["benchmark"].update(dataset_path=dataset, num_prompts=2, output_len=16, concurrencies=[1], num_warmups=0)
    doc["equivalence"]["concurrency"] = 1
    out = tmp_path / "plan.yml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out
