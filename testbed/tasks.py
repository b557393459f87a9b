"""`fab testbed.*`: the namespace testbed of fake GPU workers (docs/testbed.md). Needs root."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os

from invoke import Collection, task
from invoke.exceptions import Exit

from testbed import FAULTS, Testbed, TestbedError


LOCK = "/run/specfleet-testbed.lock"  # held by the pytest fixtures (tests/e2e/conftest.py)


def _bed() -> Testbed:
    return Testbed()


@contextlib.contextmanager
def _lock(force: bool = False):
    """Do not build or tear down a testbed under a running pytest session."""
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not force:
                raise Exit(f"error: a test session holds {LOCK} and owns the testbed; "
                           "wait for it (or pass --force to down)", code=1) from None
        yield
    finally:
        os.close(fd)


def _parse_speed(values) -> dict[str, float]:
    """['w2=0.95', 'w3=1.1,w4=0.9'] -> {'w2': 0.95, 'w3': 1.1, 'w4': 0.9}"""
    out: dict[str, float] = {}
    for item in [v for value in (values or []) for v in str(value).split(",") if v.strip()]:
        host, sep, factor = item.partition("=")
        try:
            out[host.strip()] = float(factor)
            assert sep and out[host.strip()] > 0
        except (ValueError, AssertionError):
            raise Exit(f"error: --speed wants HOST=FACTOR with FACTOR > 0, e.g. w2=0.95 (got {item!r})",
                       code=2) from None
    return out


@task(
    iterable=["speed"],
    help={
        "workers": "how many worker hosts to build (w1..wN, 1-64; default 8)",
        "speed": "simulated engine speed of a worker, HOST=FACTOR (e.g. w2=0.95); repeatable "
                 "or comma-separated; default 1.0 for every worker",
        "inventory": "where to write the inventory (default: inventory/testbed.yml)",
        "gpus": "simulated GPUs per worker (1-8; default 1), each with its own index, UUID and memory; "
                "NVLink between all pairs (nvidia-smi topo -m)",
        "login": "the inventory's login: maymust (default: an ordinary user with passwordless sudo on every "
                 "worker, as the field report's cluster has) or root",
        "scheduler": "ssh (default) or slurm: also a real Slurm cluster (munged, slurmctld, one slurmd per "
                     "worker, `gpu` GRES = the worker's GPUs); the inventory then says scheduler: slurm",
    },
)
def up(c, workers=8, speed=None, inventory=None, gpus=1, scheduler="ssh", login="maymust"):
    """Build the testbed: N worker hosts (netns + real sshd) and the NFS server, then write the inventory.

    Each worker wI is namespace sf-wI: ens33 = 10.10.30.(13+I) (ssh), ens35 =
    192.168.160.(13+I) (storage), sshd in its own mount+UTS namespace with
    private /etc, /var/lib, /usr/sbin, /opt, /mnt, /root, /home and /tmp. Waits until
    every sshd accepts connections. Refuses if a testbed is already up.
    """
    factors = _parse_speed(speed)
    try:
        with _lock():
            path = _bed().up(int(workers), speed=factors, inventory_path=inventory, gpus=int(gpus),
                             scheduler=scheduler, login=login)
    except TestbedError as e:
        raise Exit(f"error: {e}", code=1) from None
    st = _bed().state()
    per = f", {gpus} GPUs each" if int(gpus) > 1 else ""
    print(f"testbed up: {workers} workers{per} in {st.get('up_seconds', 0):.2f} s"
          + (", Slurm cluster up (sinfo: fab testbed.status)" if scheduler == "slurm" else ""))
    print(f"inventory: {path}")
    print(f"ssh:       ssh -F {_bed().ssh_config} 10.10.30.14")
    print("tear down: fab testbed.down")


@task(help={"force": "tear down even while a test session holds the testbed lock"})
def down(c, force=False):
    """Tear the testbed down: end its processes (by PID), delete sf-* namespaces and links.

    Idempotent. Also removes the unreachable route it added, the runtime and
    on-disk state, and the inventory it wrote. Touches nothing that is not the testbed's.
    """
    with _lock(force):
        print(f"testbed down in {_bed().down():.2f} s")


@task(help={"json": "print the status as JSON"})
def status(c, json_=False):
    """Show the testbed: workers, addresses, sshd alive, kernel modules, GPU memory, faults."""
    st = _bed().status()
    if json_:
        print(json.dumps(st, indent=1))
        return
    if not st["up"]:
        left = st.get("leftovers")
        print("testbed: down" + (f" (leftovers: {', '.join(left)}; run fab testbed.down)" if left else ""))
        return
    print(f"testbed: up, {st['workers']} workers; bastion {st['bastion']}; NFS {st['nfs_server']} "
          f"({'listening' if st['nfs_alive'] else 'DEAD'}); inventory {st['inventory']}")
    print(f"{'host':<5} {'ssh address':<13} {'storage (ens35)':<36} {'sshd':<5} {'GPU MiB':>7}  modules / notes")
    for name, h in st["hosts"].items():
        notes = []
        if "dev ens35" not in h["storage_route"]:
            notes.append(f"STALE ROUTE: {h['storage_route'] or 'none'}")
        if h["engine_fault"]:
            notes.append(f"engine fault: {h['engine_fault']}")
        per_gpu = h.get("gpu_memory_used_mib_per_gpu") or {}
        if len(per_gpu) > 1:
            notes.append(f"{len(per_gpu)} GPUs, MiB each: " + "/".join(str(v) for _, v in sorted(per_gpu.items())))
        mods = ",".join(h["modules"]) or "(no modules)"
        stor = " ".join(h["addresses"].get("ens35", []))
        print(f"{name:<5} {h['address']:<13} {stor:<36} {'up' if h['sshd_alive'] else 'DOWN':<5} "
              f"{h['gpu_memory_used_mib']:>7}  {'; '.join([mods, *notes])}")
    if st.get("slurm") is not None:
        print("slurm (sinfo):")
        print(st["slurm"]["sinfo"] or "  slurmctld does not answer")


@task(help={"host": "worker to power-cycle, e.g. w1"})
def reboot(c, host):
    """Power-cycle one worker: kill its processes, empty /tmp, unload modules, reboot.

    The network comes back from the host's /etc/netplan/*.yaml, modules from
    /etc/modules-load.d/*.conf; /etc, /var/lib, /opt, /mnt and /root survive.
    """
    try:
        _bed().reboot(host)
    except TestbedError as e:
        raise Exit(f"error: {e}", code=1) from None
    print(f"{host}: rebooted")


@task(help={"host": "worker to break, e.g. w1",
            "kind": "one of: " + ", ".join(FAULTS)})
def fault(c, host, kind):
    """Inject a field fault into one worker.

    stale-route: 192.168.160.0/24 moved to ens33 (NFS mounts fail: No route to host);
    dup-ip: 192.168.160.179 added on ens35 and in /etc/netplan/99-ens35.yaml;
    module-lost: all kernel modules unloaded (nvidia-smi fails, as after a kernel upgrade);
    die-during-load, never-healthy, crash-mid-bench, leave-enginecore: simulated engine
    faults (sim.json); clear-engine-fault undoes those.
    """
    try:
        print(_bed().fault(host, kind))
    except TestbedError as e:
        raise Exit(f"error: {e}", code=1) from None


ns = Collection("testbed")
for _t in (up, down, status, reboot, fault):
    ns.add_task(_t)
