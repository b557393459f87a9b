"""Shared helpers for end-to-end tests: inventories derived from the testbed's, and running `fab`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

PROJECT = Path(__file__).resolve().parents[2]
FAB = str(Path(sys.executable).parent / "fab")


def inventory_of(tb) -> Path:
    return Path(tb.state()["inventory"])


def derived_inventory(tb, tmp_path: Path, edit) -> Path:
    """A copy of the testbed inventory, changed by `edit(doc)`."""
    doc = yaml.safe_load(inventory_of(tb).read_text())
    edit(doc)
    out = tmp_path / "inventory.yml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def fab(*args: str, inventory: Path | None = None, runs: Path | None = None, timeout: float = 600,
        env: dict | None = None, prefix=None) -> subprocess.CompletedProcess:
    """`fab ARGS` in the project root; `prefix`: what runs it (e.g. `Testbed.as_login`, as the login user)."""
    e = {**os.environ, "COLUMNS": "200", **(env or {})}
    if inventory:
        e["SPECFLEET_INVENTORY"] = str(inventory)
    if runs:
        e["SPECFLEET_RUNS_DIR"] = str(runs)
    argv = [FAB, *args]
    return subprocess.run(prefix(argv) if prefix else argv, cwd=PROJECT, env=e, capture_output=True, text=True,
                          timeout=timeout)


def events(runs: Path) -> list[dict]:
    lines = []
    for f in sorted(runs.glob("*.jsonl")):
        lines += [json.loads(ln) for ln in f.read_text().splitlines() if ln.strip()]
    return lines


def host_sh(tb, host: str, script: str) -> subprocess.CompletedProcess:
    """Read a host's state without SSH (nsenter into its namespaces)."""
    return tb.exec(host, ["bash", "-c", script])


# processes of this worker only: the testbed has no PID namespace, so `ps` would also list other
# people's processes on the machine; compare each process's network namespace with the host's
_NS_PROCS = r"""
import json, os
me, out = os.readlink("/proc/self/ns/net"), []
for d in os.listdir("/proc"):
    if not d.isdigit() or int(d) == os.getpid():
        continue
    try:
        if os.readlink(f"/proc/{d}/ns/net") != me:
            continue
        argv = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
    except OSError:
        continue
    if argv[0]:
        out.append([int(d), " ".join(a.decode(errors="replace") for a in argv if a)])
print(json.dumps(out))
"""


def worker_procs(tb, host: str, check: bool = True) -> list[tuple[int, str]]:
    """(pid, command line) of every process in `host`'s network namespace (a rebooting worker with
    check=False: none)."""
    p = tb.exec(host, ["/usr/bin/python3", "-I", "-S", "-c", _NS_PROCS])
    if check:
        assert p.returncode == 0, p.stderr
    return [(pid, a) for pid, a in json.loads(p.stdout or "[]")]
