"""Issue 28 on the testbed: what a broken or hostile worker can do to the bastion, and the bastion's own
faults. One campaign (tests/e2e/plans/collect-fast.yml) on two provisioned workers, collected into a
small tmpfs this test mounts and removes (never the real disk); then, in turn:

1. a worker's result is a symlink to a bastion file, another a 1e6-deep JSON, a server log is over its
   limit: each refused in one line with its rule, the earlier valid copies merged, nothing linked;
2. the bastion's disk is full: exit 74, one line, the earlier results intact, no `.staging/`;
3. the results folder is read-only: exit 73, one line;
4. `fab collect` SIGKILLed while rsync writes: the earlier results intact; the next collect finishes
   and leaves no `.staging/`;
5. `--diff` on a file planted as a symlink to a root-only file says "is a symlink to" and shows none
   of the target; a changed host key shows its SHA256 fingerprint and no paramiko socket noise.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from e2e_helpers import FAB, PROJECT, fab, host_sh, inventory_of

pytestmark = pytest.mark.e2e

PLAN = "tests/e2e/plans/collect-fast.yml"
CAMPAIGN = "collect-fast"
WORK = "/var/lib/specfleet/campaigns"
HOSTS = ("w1", "w2")


def out(r) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout[-5000:]}\n--- stderr\n{r.stderr[-3000:]}"


def flat(text: str) -> str:
    return " ".join(text.split())


def run_dir(host: str) -> str:
    return f"{WORK}/{CAMPAIGN}/{host}"


def snapshot(camp: Path) -> dict[str, bytes]:
    return {str(p.relative_to(camp)): p.read_bytes() for p in camp.rglob("*") if p.is_file()}


def error_lines(r) -> list[str]:
    return [ln for ln in (r.stdout + r.stderr).splitlines() if ln.startswith("error: ")]


def fill(mnt: Path, leave: int) -> Path:
    f = mnt / "filler"
    f.unlink(missing_ok=True)
    st = os.statvfs(mnt)
    with open(f, "wb") as fh:
        try:
            fh.write(b"\0" * max(st.f_bavail * st.f_frsize - leave, 0))
        except OSError:
            pass
    return f


def staged_bytes(camp: Path) -> int:
    """What rsync has written into the staging folder so far."""
    total = 0
    for root, _, files in os.walk(camp / ".staging"):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


@pytest.fixture
def results_fs(tmp_path):
    mnt = tmp_path / "results"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "sf-e2e-results", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_hostile_worker_and_the_bastions_own_faults(testbed_factory, tmp_path, results_fs):
    tb = testbed_factory(workers=2)
    inv = inventory_of(tb)
    r = fab("provision", inventory=inv, runs=tmp_path / "runs-provision")
    assert r.returncode == 0, out(r)
    r = fab("bench", "--hosts", "w1,w2", "--plan", PLAN, inventory=inv, runs=tmp_path / "runs-bench")
    assert r.returncode == 0, out(r)
    camp = results_fs / CAMPAIGN

    def collect(tag: str):
        return fab("collect", "--plan", PLAN, "--results", str(results_fs), inventory=inv,
                   runs=tmp_path / f"runs-{tag}")

    first = collect("first")
    assert first.returncode == 0, out(first)
    merged_before = json.loads((camp / "merged.json").read_text())

    # 1. hostile worker files
    bait = tmp_path / "bastion-file.json"  # a bastion file, a valid result with a made-up number
    d = json.loads((camp / "w1" / "ngram_conc1.json").read_text())
    d["output_throughput"] = 123456.0
    bait.write_text(json.dumps(d))
    assert host_sh(tb, "w1", f"cd {run_dir('w1')} && rm -f ngram_conc1.json && ln -s {bait} ngram_conc1.json && "
                             "truncate -s 70M vanilla.server.log").returncode == 0
    deep = "[" * 10**6 + "]" * 10**6
    assert tb.exec("w2", ["bash", "-c", f"cat > {run_dir('w2')}/eagle3_conc1.json"], input=deep).returncode == 0
    hostile = collect("hostile")
    text = flat(hostile.stdout)
    assert hostile.returncode == 0 and "Traceback" not in hostile.stdout + hostile.stderr, out(hostile)
    assert "w1:ngram_conc1.json on the worker is refused (a symbolic link" in text, out(hostile)
    assert "w1:vanilla.server.log on the worker is refused (73400320 bytes, over the 64 MB limit" in text
    assert "w2:eagle3_conc1.json on the worker is invalid (JSON nested 1000000 levels deep" in text
    assert "RecursionError" not in hostile.stdout + hostile.stderr
    assert not (camp / "w1" / "ngram_conc1.json").is_symlink()
    assert json.loads((camp / "merged.json").read_text()) == merged_before  # the earlier copies, merged
    assert 123456.0 not in [row["output_tok_s"] for row in merged_before]
    assert not (camp / ".staging").exists()
    # the worker is mended (the runner would measure the items again; here the good copies go back)
    for h, f in (("w1", "ngram_conc1.json"), ("w2", "eagle3_conc1.json")):
        host_sh(tb, h, f"rm -f {run_dir(h)}/{f}")
        tb.exec(h, ["bash", "-c", f"cat > {run_dir(h)}/{f}"], input=(camp / h / f).read_text())
    host_sh(tb, "w1", f"truncate -s 2M {run_dir('w1')}/vanilla.server.log")
    before = snapshot(camp)

    # 2. the bastion's disk is full while rsync writes
    filler = fill(results_fs, 256 * 1024)
    full = collect("full")
    assert full.returncode == 74, out(full)
    assert len(error_lines(full)) == 1 and "the bastion's disk is full" in error_lines(full)[0], out(full)
    assert "nothing needs measuring again" in error_lines(full)[0] and "crashed" not in full.stderr
    assert snapshot(camp) == before and not (camp / ".staging").exists()
    filler.unlink()

    # 3. read-only
    subprocess.run(["mount", "-o", "remount,ro", str(results_fs)], check=True)
    try:
        ro = collect("ro")
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(results_fs)], check=True)
    assert ro.returncode == 73 and len(error_lines(ro)) == 1 and "Read-only file system" in ro.stderr, out(ro)
    assert snapshot(camp) == before

    # 4. fab collect SIGKILLed while rsync writes a big file
    host_sh(tb, "w1", f"head -c 60000000 /dev/urandom > {run_dir('w1')}/vanilla.server.log")
    env = {**os.environ, "COLUMNS": "200", "SPECFLEET_INVENTORY": str(inv), "SPECFLEET_RUNS_DIR": str(tmp_path / "rk")}
    p = subprocess.Popen([FAB, "collect", "--plan", PLAN, "--results", str(results_fs)], cwd=PROJECT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and staged_bytes(camp) < 4 * 2**20 and p.poll() is None:
            time.sleep(0.002)
        assert p.poll() is None, "the collect finished before it could be killed: the test proves nothing"
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == -9
    left = snapshot(camp)
    assert any(k.startswith(".staging/w1.") for k in left), "the kill came after the copy: it proves nothing"
    assert {k: v for k, v in left.items() if not k.startswith(".staging/")} == before, \
        "a killed collect changed a collected file"
    assert not list(camp.glob("w*/vanilla.server.log.*")) and not list(camp.glob("w*/.*"))
    done = collect("after-kill")
    assert done.returncode == 0, out(done)
    assert (camp / "w1" / "vanilla.server.log").stat().st_size == 60000000
    assert not (camp / ".staging").exists()

    # 5a. --diff never reads through a link planted at a managed path
    secret = "/opt/sf-e2e-secret"  # a worker's /opt is its own
    assert host_sh(tb, "w1", f"echo TOPSECRET-{os.getpid()} > {secret} && chmod 600 {secret} && "
                             f"rm -f /etc/modules-load.d/nvidia.conf && "
                             f"ln -s {secret} /etc/modules-load.d/nvidia.conf").returncode == 0
    try:
        dr = fab("provision", "--only", "nvidia", "--hosts", "w1", "--check", "--diff", inventory=inv,
                 runs=tmp_path / "runs-diff")
        assert "/etc/modules-load.d/nvidia.conf is a symlink to /opt/sf-e2e-secret" in flat(dr.stdout), out(dr)
        assert "TOPSECRET" not in dr.stdout + dr.stderr
    finally:
        host_sh(tb, "w1", f"rm -f {secret} /etc/modules-load.d/nvidia.conf")

    # 5b. a changed host key: SHA256 fingerprints, no paramiko noise
    doc = yaml.safe_load(inv.read_text())
    kh = tmp_path / "known_hosts"
    keyfile = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keyfile)], check=True)
    addr = doc["hosts"]["w1"]["address"]
    kh.write_text(f"{addr} {' '.join(keyfile.with_suffix('.pub').read_text().split()[:2])}\n")
    doc["hosts"]["w1"]["known_hosts"] = str(kh)
    inv2 = tmp_path / "inv-badkey.yml"
    inv2.write_text(yaml.safe_dump(doc, sort_keys=False))
    bad = fab("facts", "--hosts", "w1", inventory=inv2, runs=tmp_path / "runs-key")
    assert bad.returncode == 4, out(bad)
    want = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(keyfile.with_suffix(".pub"))],
                          capture_output=True, text=True).stdout.split()[1]
    assert "CHANGED (got ssh-ed25519 SHA256:" in flat(bad.stdout) and f"known_hosts has ssh-ed25519 {want}" in \
        flat(bad.stdout), out(bad)
    assert "Socket exception" not in bad.stdout + bad.stderr and "Bad file descriptor" not in bad.stderr
