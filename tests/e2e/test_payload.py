"""Files of any size placed on real sshd workers: the payload streams over the channel's stdin.

The real Spec-Bench file (698 KB) and a generated 50 MB file, as root and as a non-root login
through `sudo -n`; each placed twice (the second run changes nothing). What is on a worker is
read back without SSH (nsenter), by checksum.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from specfleet.fleet import EXIT_FAILED, Fleet
from specfleet.inventory import load_inventory
from specfleet.step import Status
from specfleet.steps.files import FileContent

from e2e_helpers import host_sh, inventory_of
from test_privilege import add_user, as_user

pytestmark = pytest.mark.e2e
SPEC_BENCH = Path("/work/shared/datasets/spec_bench/question.jsonl")


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


def play(inv_path: Path, steps_for) -> Fleet:
    fleet = Fleet(list(load_inventory(inv_path).hosts.values()))
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
                FileContent("/var/lib/specfleet/big.bin", source=big_file, mode="0600")]
    first = play(inv, steps)
    assert first.exit_code() == 0, [(r.host, r.step, r.message) for r in first.results]
    assert sorted(r.status for r in first.results) == [Status.CHANGED] * 4
    for w in ("w1", "w2"):
        assert remote_sha(tb, w, "/var/lib/specfleet/datasets/t/question.jsonl") == sha(real)
        assert remote_sha(tb, w, "/var/lib/specfleet/big.bin") == sha(big_file)
        assert host_sh(tb, w, "stat -c %a /var/lib/specfleet/big.bin").stdout.strip() == "600"
        # no temp file left beside them
        assert host_sh(tb, w, "ls -A /var/lib/specfleet/datasets/t").stdout.split() == ["question.jsonl"]
    second = play(inv, steps)
    assert [r.status for r in second.results] == [Status.OK] * 4


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
