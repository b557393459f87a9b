"""A real Slurm cluster on the testbed: munged, one slurmctld, one slurmd per worker (docs/testbed.md).

Debian's own daemons (slurmctld, slurmd, munge), nothing mocked. Everything lives under the
testbed's run dir (`<run_dir>/slurm/`): the munge key and socket, slurm.conf, gres.conf,
cgroup.conf, the controller's state, each node's spool and the logs. The machine's /etc/slurm
and /etc/munge are never read: the daemons get `-f <slurm.conf>`, munged gets its key, socket,
log, pid and seed files on its command line, and clients get SLURM_CONF (`client_env`).

- munged and slurmctld run in their own namespace `sf-ctl` (10.10.30.2 on the management bridge),
  so nothing listens in the root namespace; the bastion reaches slurmctld through sf-br-mgmt.
- each slurmd runs in its worker's net + mount + UTS namespaces (nsenter to the worker's sshd),
  so job steps see the worker's private /opt, /var/lib (GPU state), /usr/sbin and /usr/bin
  (the nvidia-smi stand-in), exactly as a login over SSH does. `ip netns exec` remounts /sys, so
  the worker's mount namespace gets the machine's cgroup tree bind-mounted at /sys/fs/cgroup
  (slurmd refuses to start without one); nothing in it is written (proctrack/pgid, task/none).
- GPUs are `gpu` GRES, one character device per simulated GPU (c 195 N, as /dev/nvidiaN), so
  slurmd sets CUDA_VISIBLE_DEVICES per step from the allocation; the simulated engine honours it.

Traps met on Debian 12: the daemons must be started under the names
`slurmctld` / `slurmd` (Debian's `*-wlm` names silently drop GRES), and a node declares more
CPUs than the machine has only with `SlurmdParameters=config_overrides`.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

from . import net
from .net import BR_MGMT, TestbedError

CTL_NS = "sf-ctl"
CTL_IP = "10.10.30.2"          # on sf-br-mgmt; mgmt_ip(i) starts at .14
CTL_NAME = "sf-ctl"
CTLD_PORT = 16817              # not Slurm's default 6817: a site's own cluster may use that
SLURMD_PORT = 16818
PARTITION = "gpu"
CPUS = 8                       # per node, declared (config_overrides: the machine has fewer)
MEMORY_MB = 16000
# AuthInfo cred_expire: a step credential's lifetime, and how long Slurm holds a requeued job
# (BeginTime = requeue + cred_expire + 1; slurm.conf(5)). Slurm's default 120 s held the requeue
# e2e test for two minutes; 10 s still leaves a loaded 2-core machine time to launch a step.
CRED_EXPIRE_S = 10
BINARIES = {"slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd",
            "slurmstepd": "/usr/sbin/slurmstepd", "munged": "/usr/sbin/munged"}
PACKAGES = "slurmctld slurmd slurm-client munge (scripts/setup.sh installs them)"


def slurm_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "slurm"


def conf_path(run_dir: Path) -> Path:
    return slurm_dir(run_dir) / "slurm.conf"


def client_env(run_dir: Path, env: dict | None = None) -> dict:
    """The environment a Slurm client (sbatch, squeue, sinfo, scontrol) needs to reach this cluster."""
    return {**(os.environ if env is None else env), "SLURM_CONF": str(conf_path(run_dir))}


def missing_binaries() -> list[str]:
    return [p for p in BINARIES.values() if not os.access(p, os.X_OK)] + \
        [c for c in ("sbatch", "squeue", "sinfo", "scontrol", "scancel") if not shutil.which(c)]


def node_names(workers: list[str]) -> list[str]:
    return list(workers)  # the Slurm node name is the inventory host name (w1, w2, ...)


def slurm_conf(d: Path, workers: list[str], gpus: int, addrs: dict[str, str]) -> str:
    """slurm.conf for the testbed cluster (pure: names and addresses in, text out)."""
    nodes = "\n".join(
        f"NodeName={w} NodeHostname=sf-{w} NodeAddr={addrs[w]} CPUs={CPUS} RealMemory={MEMORY_MB} "
        f"Gres=gpu:{gpus} State=UNKNOWN" for w in workers)
    return f"""# Written by `fab testbed.up --scheduler slurm`; the testbed's own cluster (docs/testbed.md)
ClusterName=specfleet-testbed
SlurmctldHost={CTL_NAME}({CTL_IP})
SlurmctldPort={CTLD_PORT}
SlurmdPort={SLURMD_PORT}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/munge.socket,cred_expire={CRED_EXPIRE_S}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/ctld-state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={d}/log/jobcomp.txt
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=5
MessageTimeout=10
SlurmdTimeout=60
InactiveLimit=0
KillWait=30
MinJobAge=600
{nodes}
PartitionName={PARTITION} Nodes={','.join(workers)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


def gres_conf(d: Path, workers: list[str], gpus: int) -> str:
    files = f"{d}/dev/nvidia[0-{gpus - 1}]" if gpus > 1 else f"{d}/dev/nvidia0"
    return "".join(f"NodeName={w} Name=gpu File={files}\n" for w in workers)


class SlurmCluster:
    """Start and stop the testbed's Slurm daemons (the Testbed controller calls these)."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.d = slurm_dir(run_dir)

    def up(self, workers: list[str], gpus: int, worker_pids: dict[str, int], addrs: dict[str, str],
           st: dict, save, timeout: float = 60, users: Path | None = None) -> dict:
        """Write the config, start munged + slurmctld in sf-ctl and a slurmd per worker; wait until
        every node is idle with its GPUs. Returns {daemon: pid} (also recorded in `st` as it goes).
        `users`: a folder with the workers' passwd and group (the login user in them), which slurmctld
        sees as its /etc/passwd and /etc/group: it refuses a job of a user it cannot name. Any user of
        the bastion reaches the cluster (slurm.conf readable, munge socket open; the key stays root's)."""
        missing = missing_binaries()
        if missing:
            raise TestbedError(f"--scheduler slurm needs {', '.join(missing)}: install {PACKAGES}")
        d = self.d
        for sub in ("munge", "munge-key", "ctld-state", "log", "dev", *(f"spool/{w}" for w in workers)):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)
        os.chmod(d / "munge", 0o755)  # the socket: any user's client authenticates through it
        os.chmod(d / "munge-key", 0o700)
        key = d / "munge-key" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        for i in range(gpus):
            dev = d / "dev" / f"nvidia{i}"
            try:
                os.mknod(dev, 0o600 | 0o020000, os.makedev(195, i))  # a char device, as /dev/nvidiaN
            except PermissionError:
                dev.touch()
        (d / "slurm.conf").write_text(slurm_conf(d, workers, gpus, addrs))
        (d / "gres.conf").write_text(gres_conf(d, workers, gpus))
        (d / "cgroup.conf").write_text("CgroupAutomount=no\nConstrainDevices=no\n")
        pids = st.setdefault("slurm_pids", {})
        self._ctl_ns()
        st["slurm_ns"] = True
        save(st)
        pids["munged"] = self._start(
            ["nsenter", f"--net=/run/netns/{CTL_NS}", "--", BINARIES["munged"], "-F", "-f",
             f"--socket={d}/munge/munge.socket", f"--key-file={key}", f"--log-file={d}/log/munged.log",
             f"--pid-file={d}/munge/munged.pid", f"--seed-file={d}/munge/munged.seed"], "munged")
        self._wait(lambda: (d / "munge" / "munge.socket").exists(), 10, "munged", pids["munged"])
        binds = "".join(f" && mount -n --bind {users / f} /etc/{f}" for f in ("passwd", "group")) if users else ""
        pids["slurmctld"] = self._start(
            # its own UTS namespace named sf-ctl: slurmctld runs only on a host of SlurmctldHost's name; its own
            # mount namespace, where /etc/passwd and /etc/group are the workers' (`users`)
            ["nsenter", f"--net=/run/netns/{CTL_NS}", "--", "unshare", "--uts", "--mount", "--propagation",
             "private", "--", "/bin/sh", "-c",
             f'hostname {CTL_NAME}{binds} && exec "$0" "$@"', BINARIES["slurmctld"], "-D", "-i",
             "-f", str(d / "slurm.conf")], "slurmctld")
        save(st)
        self._wait(lambda: net.listening(pids["slurmctld"], CTLD_PORT), 20, "slurmctld", pids["slurmctld"])
        for w in workers:
            pids[f"slurmd-{w}"] = self._start(
                ["nsenter", "-t", str(worker_pids[w]), "-n", "-m", "-u", "--", "/bin/sh", "-c",
                 # the worker's mount namespace has a fresh /sys (ip netns exec): give it the cgroup tree
                 # (slurmd's cgroup/v1 plugin only checks that /sys/fs/cgroup/systemd is a cgroup fs: a tmpfs
                 # with the named hierarchy, private to this mount namespace; proctrack/pgid and task/none
                 # create nothing there)
                 'mountpoint -q /sys/fs/cgroup || { mount -n -t tmpfs -o mode=755 sf-cgroup /sys/fs/cgroup && '
                 'mkdir -p /sys/fs/cgroup/systemd && '
                 'mount -n -t cgroup -o none,name=systemd sf-cgroup /sys/fs/cgroup/systemd; }; exec "$0" "$@"',
                 BINARIES["slurmd"], "-D", "-N", w, "-f", str(d / "slurm.conf")], f"slurmd-{w}")
        save(st)
        self.wait_idle(workers, gpus, timeout, pids)
        return pids

    def _ctl_ns(self) -> None:
        net.ip_batch([f"netns add {CTL_NS}", f"link add sf-ctl-m type veth peer name eth0 netns {CTL_NS}"])
        Path("/proc/sys/net/ipv6/conf/sf-ctl-m/disable_ipv6").write_text("1")
        net.ip_batch([f"link set sf-ctl-m master {BR_MGMT} up"])
        net.ip_batch(["link set lo up", "link set eth0 addrgenmode none", f"addr add {CTL_IP}/24 dev eth0",
                      "link set eth0 up"], netns=CTL_NS)

    def _start(self, argv: list[str], name: str) -> int:
        log = open(self.d / "log" / f"{name}.out", "ab")
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "SLURM_CONF": str(self.d / "slurm.conf")}
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd="/",
                             start_new_session=True)
        log.close()
        return p.pid  # nsenter execs the daemon: this PID is the daemon's (sh execs slurmd too)

    def _wait(self, ok, timeout: float, name: str, pid: int) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            if not net.alive(pid) or time.monotonic() > deadline:
                raise TestbedError(f"{name} did not start: {net.tail(self.d / 'log' / f'{name}.out')} "
                                   f"(logs in {self.d / 'log'})")
            time.sleep(0.1)

    def sinfo(self) -> list[dict]:
        """Nodes as `sinfo --json` reports them ([] when the controller does not answer)."""
        p = subprocess.run(["sinfo", "--json"], capture_output=True, text=True, timeout=20,
                           env=client_env(self.run_dir))
        if p.returncode != 0:
            return []
        try:
            return json.loads(p.stdout).get("nodes", [])
        except ValueError:
            return []

    def wait_idle(self, workers: list[str], gpus: int, timeout: float, pids: dict | None = None) -> None:
        deadline = time.monotonic() + timeout
        seen: dict = {}
        while True:
            dead = [k for k, pid in (pids or {}).items() if not net.alive(pid)]
            if dead:
                raise TestbedError(f"{dead[0]} exited: {net.tail(self.d / 'log' / f'{dead[0]}.out')}")
            nodes = {n.get("name"): n for n in self.sinfo()}
            seen = {w: (nodes.get(w, {}).get("state"), nodes.get(w, {}).get("gres")) for w in workers}
            if all(str(s).lower() == "idle" and g == f"gpu:{gpus}" for s, g in seen.values()):
                return
            if time.monotonic() > deadline:
                raise TestbedError(f"Slurm nodes not idle with gpu:{gpus} after {timeout:.0f} s: {seen} "
                                   f"(logs in {self.d / 'log'})")
            time.sleep(0.5)


def shared_dir(disk_dir: Path) -> Path:
    """A path every worker and the bastion see as one directory (the testbed's /var/tmp is shared)."""
    return Path(disk_dir) / "shared"


def inventory_block(run_dir: Path, disk_dir: Path) -> dict:
    """The inventory's `scheduler:` for this cluster (specfleet/scheduler.py validates it)."""
    shared = shared_dir(disk_dir)
    shared.mkdir(parents=True, exist_ok=True)
    return {"kind": "slurm", "partition": PARTITION, "time_limit": "00:30:00",
            "slurm_conf": str(conf_path(run_dir)), "shared_dir": str(shared), "extra_args": []}
