"""The testbed controller: a fleet of fake GPU workers on one Linux machine.

Each worker `wI` is a network namespace `sf-wI` whose real OpenSSH sshd runs
in a private mount + UTS namespace (see testbed/host/host-init). `sf-nfs`
plays the storage server. The root namespace is the bastion. See
docs/testbed.md for the topology, and docs/dev/contracts.md for the contract.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path

from . import net, seed, slurm
from .net import BR_MGMT, BR_STOR, NFS_IP, NFS_NS, TestbedError, mgmt_ip, stor_ip

PROJECT_ROOT = Path(__file__).resolve().parents[1]
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FAULTS = ("stale-route", "dup-ip", "module-lost", "die-during-load", "never-healthy",
          "crash-mid-bench", "leave-enginecore", "clear-engine-fault")
ENGINE_FAULTS = FAULTS[3:7]
SIM = "/var/lib/specfleet-testbed/sim.json"
GPU_DIR = "/var/lib/specfleet-testbed/gpu"
MAX_GPUS = 8  # per worker, as on an HGX node
SCHEDULERS = ("ssh", "slurm")  # ssh: specfleet starts the runners; slurm: also a real Slurm cluster


class Testbed:
    """Build, inspect, break and tear down the namespace fleet (needs root)."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, project_root: str | os.PathLike = PROJECT_ROOT,
                 run_dir: str | os.PathLike = "/run/specfleet-testbed",
                 disk_dir: str | os.PathLike = "/var/tmp/specfleet-testbed"):
        self.project_root = Path(project_root)
        self.run_dir = Path(run_dir)
        self.disk_dir = Path(disk_dir)
        self._procs: dict[int, subprocess.Popen] = {}  # children we must reap

    # ---- state ---------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.run_dir / "state.json"

    def state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return {}

    def _save(self, st: dict) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(st, indent=1))
        tmp.replace(self.state_file)

    @property
    def workers(self) -> list[str]:
        return self.state().get("workers", [])

    @property
    def key(self) -> Path:
        return self.run_dir / "client" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.run_dir / "client" / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.run_dir / "client" / "ssh_config"

    @property
    def inventory_path(self) -> Path | None:
        inv = self.state().get("inventory")
        return Path(inv) if inv else None

    def address(self, host: str) -> str:
        return mgmt_ip(self._index(host))

    def storage_address(self, host: str) -> str:
        return stor_ip(self._index(host))

    def _index(self, host: str) -> int:
        host = host.removeprefix("sf-")
        if host not in self.workers:
            raise TestbedError(f"no worker {host!r} in the testbed (workers: {', '.join(self.workers) or 'none'})")
        return int(host[1:])

    def pid(self, host: str) -> int:
        """PID of the worker's sshd (its namespaces are the host's)."""
        self._index(host)
        return self.state()["pids"][host.removeprefix("sf-")]

    # ---- up ------------------------------------------------------------------
    def up(self, workers: int, speed: dict[str, float] | None = None,
           inventory_path: str | os.PathLike | None = None, kmod: bool = True, gpus: int = 1,
           scheduler: str = "ssh", login: str = seed.LOGIN) -> Path:
        """Build `workers` hosts, wait until every sshd accepts TCP, write the inventory.

        `kmod=False` seeds workers like a stock image without kmod (no
        /etc/modules, so modules-load.d/modules.conf dangles). `gpus`: simulated
        GPUs per worker (1..MAX_GPUS), each with its own memory. `scheduler="slurm"`: also a real
        Slurm cluster (testbed/slurm.py: munged, slurmctld, one slurmd per worker, `gpu` GRES).
        `login`: the inventory's user: `maymust` (default; an ordinary user with NOPASSWD sudo on every
        worker, as the field report's cluster has) or `root`.
        """
        t0 = time.monotonic()
        if os.geteuid() != 0:
            raise TestbedError("the testbed needs root (network namespaces, mounts)")
        if not 1 <= workers <= net.MAX_WORKERS:
            raise TestbedError(f"workers must be 1..{net.MAX_WORKERS}, not {workers}")
        if not 1 <= int(gpus) <= MAX_GPUS:
            raise TestbedError(f"gpus must be 1..{MAX_GPUS}, not {gpus}")
        if login not in seed.LOGINS:
            raise TestbedError(f"login must be one of {', '.join(seed.LOGINS)}, not {login!r}")
        if scheduler not in SCHEDULERS:
            raise TestbedError(f"scheduler must be one of {', '.join(SCHEDULERS)}, not {scheduler!r}")
        if scheduler == "slurm" and slurm.missing_binaries():
            raise TestbedError(f"--scheduler slurm needs {', '.join(slurm.missing_binaries())}: "
                               f"install {slurm.PACKAGES}")
        names = [f"w{i}" for i in range(1, workers + 1)]
        speed = dict(speed or {})
        unknown = sorted(set(speed) - set(names))
        if unknown:
            raise TestbedError(f"--speed names unknown workers: {', '.join(unknown)}")
        self._refuse_if_busy()
        st = {"workers": names, "speed": speed, "kmod": kmod, "gpus": int(gpus), "pids": {}, "t_up": time.time(),
              "scheduler": scheduler, "login": login,
              "added_unreachable": False, "created_run_sshd": False}
        try:
            self._prepare_dirs(st)
            self._seed(names, speed, kmod, int(gpus), login)
            st["login_uid"] = seed.login_ids(Path("/etc/passwd").read_text(), Path("/etc/group").read_text())
            self._save(st)
            self._build_network(names, st)
            self._start_nfs(st)
            for i, n in enumerate(names, 1):
                st["pids"][n] = self._boot(n, first=True)
            self._save(st)
            self._wait_ready(names)
            sched = None
            if scheduler == "slurm":
                os.chmod(self.run_dir, 0o711)  # any bastion user reaches slurm.conf and munge's socket
                slurm.SlurmCluster(self.run_dir).up(names, int(gpus), st["pids"],
                                                    {n: self.address(n) for n in names}, st, self._save,
                                                    users=self.users_dir)
                sched = slurm.inventory_block(self.run_dir, self.disk_dir)
                if login != "root":  # the site's scratch: the submitting user's
                    os.chown(sched["shared_dir"], st["login_uid"], st["login_uid"])
            inv = Path(inventory_path) if inventory_path else self.project_root / "inventory" / "testbed.yml"
            st["inventory"] = str(seed.inventory(inv, self.run_dir, names, scheduler=sched, login=login))
            st["up_seconds"] = round(time.monotonic() - t0, 3)
            self._save(st)
            return inv
        except BaseException:
            self.down()
            raise

    def _refuse_if_busy(self) -> None:
        if self.state_file.exists() or net.our_netns() or net.our_links():
            raise TestbedError(
                "a testbed is already up (found "
                + ", ".join(filter(None, [str(self.state_file) if self.state_file.exists() else "",
                                          *net.our_netns(), *net.our_links()]))
                + "); run `fab testbed.down` first")
        problems = net.conflicts()
        if problems:
            raise TestbedError("10.10.30.0/24 or 192.168.160.0/24 is already in use in the root "
                               "namespace by something that is not the testbed: " + "; ".join(problems))

    def _prepare_dirs(self, st: dict) -> None:
        shutil.rmtree(self.disk_dir, ignore_errors=True)  # leftovers of a crashed run: ours by name
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.disk_dir.mkdir(mode=0o700, parents=True)
        # traversable, not listable: a worker's login user reads what a test places on the disk by its path
        os.chmod(self.disk_dir, 0o711)
        if not os.path.isdir("/run/sshd"):  # sshd's privilege-separation dir
            os.mkdir("/run/sshd", 0o755)
            st["created_run_sshd"] = True
        self._save(st)

    @property
    def users_dir(self) -> Path:
        """The workers' /etc/passwd and /etc/group (the login user in them), for the bastion's side."""
        return self.run_dir / "users"

    def as_login(self, argv: list[str]) -> list[str]:
        """`argv` run on the bastion as the workers' login user (`maymust`), as the site's login node runs
        a user's `fab`: in a private mount namespace whose /etc/passwd and /etc/group are the workers'
        (so the name resolves, for Slurm too), with that uid and gid. The machine's files stay as they are."""
        uid = self.state()["login_uid"]
        binds = " && ".join(f"mount -n --bind {self.users_dir / f} /etc/{f}" for f in ("passwd", "group"))
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                f'{binds} && exec setpriv --reuid={uid} --regid={uid} --init-groups -- "$@"', "as-login", *argv]

    def _seed(self, names: list[str], speed: dict[str, float], kmod: bool, gpus: int = 1,
              login: str = seed.LOGIN) -> None:
        seed.client_files(self.run_dir, login)
        known = "".join(seed.sshd_files(self.run_dir, n, int(n[1:])) for n in names)
        seed.write(self.known_hosts, known)
        seed.export_tree(self.disk_dir)
        for n in names:
            seed.host_disk(self.disk_dir, self.run_dir, n, int(n[1:]), float(speed.get(n, 1.0)), kmod, gpus)
        shutil.copy(seed.HOST_SRC / "host-init", self.run_dir / "host-init")
        upper = self.disk_dir / "hosts" / names[0] / "ovl" / "_etc" / "upper"  # every worker's are the same
        self.users_dir.mkdir(mode=0o755, exist_ok=True)
        for f in ("passwd", "group"):
            shutil.copy(upper / f, self.users_dir / f)

    def _build_network(self, names: list[str], st: dict) -> None:
        # The guard route goes in first, so there is never a moment where the
        # root namespace could send storage-net traffic out of eth0.
        if not net.has_unreachable_stor_route():
            st["added_unreachable"] = True
            self._save(st)
            net.ip_batch([f"route add unreachable {net.STOR_NET}"])
        lines = [f"link add {BR_MGMT} type bridge", f"link add {BR_STOR} type bridge",
                 f"netns add {NFS_NS}", f"link add sf-nfs-s type veth peer name stor0 netns {NFS_NS}"]
        for n in names:
            lines += [f"netns add sf-{n}",
                      f"link add sf-{n}-m type veth peer name ens33 netns sf-{n}",
                      f"link add sf-{n}-s type veth peer name ens35 netns sf-{n}"]
        net.ip_batch(lines)
        root_links = [BR_MGMT, BR_STOR, "sf-nfs-s"] + [f"sf-{n}-{s}" for n in names for s in "ms"]
        for link in root_links:  # no IPv6 on anything we add to the root namespace
            Path(f"/proc/sys/net/ipv6/conf/{link}/disable_ipv6").write_text("1")
        lines = [f"addr add {net.BASTION_IP}/24 dev {BR_MGMT}",
                 f"link set {BR_MGMT} up", f"link set {BR_STOR} up",
                 f"link set sf-nfs-s master {BR_STOR} up"]
        for n in names:
            lines += [f"link set sf-{n}-m master {BR_MGMT} up", f"link set sf-{n}-s master {BR_STOR} up"]
        net.ip_batch(lines)
        net.ip_batch(["link set lo up", "link set stor0 addrgenmode none",
                      f"addr add {NFS_IP}/24 dev stor0", "link set stor0 up"], netns=NFS_NS)
        # First boot: the addresses of each host's 50-testbed.yaml, set from
        # here in parallel (a reboot runs the host's own `netplan apply`).
        procs = []
        for n in names:
            i = int(n[1:])
            cmds = ["link set lo up", "link set ens33 addrgenmode none", "link set ens35 addrgenmode none",
                    f"addr add {mgmt_ip(i)}/24 dev ens33", f"addr add {stor_ip(i)}/24 dev ens35",
                    "link set ens33 up", "link set ens35 up"]
            p = subprocess.Popen(["ip", "-n", f"sf-{n}", "-batch", "-"], stdin=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            p.stdin.write("\n".join(cmds) + "\n")
            p.stdin.close()
            procs.append((n, p))
        for n, p in procs:
            if p.wait() != 0:
                raise TestbedError(f"configuring sf-{n} failed: {p.stderr.read().strip()}")

    def _start_nfs(self, st: dict) -> None:
        """A TCP listener on 192.168.160.7:2049: reachability is all mount.nfs4 checks."""
        log = open(self.run_dir / "nfs.log", "ab")
        p = subprocess.Popen(
            ["ip", "netns", "exec", NFS_NS, "socat",
             f"TCP-LISTEN:2049,bind={NFS_IP},reuseaddr,fork,backlog=256", "EXEC:/bin/true"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        self._procs[p.pid] = p
        st["pids"]["nfs"] = p.pid
        deadline = time.monotonic() + 10
        # look at the listener's own socket table instead of connecting: the
        # root namespace must never open a connection to 192.168.160.0/24
        while not net.listening(p.pid, 2049):
            if p.poll() is not None or time.monotonic() > deadline:
                raise TestbedError(f"NFS stand-in (socat) did not start: {net.tail(self.run_dir / 'nfs.log')}")
            time.sleep(0.01)

    def _boot(self, name: str, first: bool) -> int:
        hostrun = self.run_dir / "hosts" / name
        env = {"PATH": HOST_PATH, "LANG": "C.UTF-8", "SF_NAME": f"sf-{name}",
               "SF_HOSTRUN": str(hostrun), "SF_DISK": str(self.disk_dir / "hosts" / name),
               "SF_BOOT": "first" if first else "reboot"}
        log = open(hostrun / "sshd.log", "ab")
        p = subprocess.Popen(
            ["ip", "netns", "exec", f"sf-{name}", "unshare", "--mount", "--uts",
             "--propagation", "private", "--", "/bin/bash", str(self.run_dir / "host-init")],
            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            cwd="/")
        log.close()
        self._procs[p.pid] = p  # ip, unshare and host-init exec: this PID becomes sshd
        return p.pid

    def _wait_ready(self, names: list[str], timeout: float = 30) -> None:
        addrs = {n: self.address(n) for n in names}
        net.assert_mgmt_route(*addrs.values())
        pending = dict(addrs)
        deadline = time.monotonic() + timeout
        while pending:
            for n, a in list(pending.items()):
                # connect only once the host's own socket table shows sshd
                # listening: a connect before its address exists waits on ARP
                if net.listening(self.state()["pids"][n], 22) and net.accepts(a, 22):
                    del pending[n]
                elif not net.alive(self.state()["pids"][n]):
                    raise TestbedError(f"worker {n} died while booting: "
                                       f"{net.tail(self.run_dir / 'hosts' / n / 'sshd.log')}")
            if pending and time.monotonic() > deadline:
                raise TestbedError(f"sshd did not come up on {', '.join(pending)} within {timeout:.0f} s")
            if pending:
                time.sleep(0.01)

    # ---- down ----------------------------------------------------------------
    def down(self) -> float:
        """Remove everything the testbed made (idempotent); returns seconds taken."""
        t0 = time.monotonic()
        st = self.state()
        nss = net.our_netns()
        pids = [p for ps in net.netns_pids(nss).values() for p in ps]
        net.end_pids(pids, reap=self._reap)
        net.ip_batch([f"netns del {ns}" for ns in nss], force=True)
        links = net.our_links()  # veth ends normally vanish with their namespace
        net.ip_batch([f"link del {link}" for link in links], force=True)
        if st.get("added_unreachable"):
            net.ip_batch([f"route del unreachable {net.STOR_NET}"], force=True)
        # /run/sshd (created by up if missing) stays: it is the standard Debian
        # dir, and another sshd on this machine may have started using it since
        inv = st.get("inventory")
        if inv and Path(inv).is_file():
            Path(inv).unlink()  # it would point at keys that no longer exist
        shutil.rmtree(self.run_dir, ignore_errors=True)
        shutil.rmtree(self.disk_dir, ignore_errors=True)
        self._reap()
        return time.monotonic() - t0

    def _reap(self) -> None:
        for pid, p in list(self._procs.items()):
            if p.poll() is not None:
                del self._procs[pid]

    # ---- per host ------------------------------------------------------------
    def exec(self, host: str, cmd: list[str] | str, *, input: str | None = None,
             check: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run CMD on HOST without SSH: nsenter into its sshd's net+mount+uts namespaces.

        A string is run by /bin/sh -c; a list is run as is (no shell).
        """
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        env = {"PATH": HOST_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
        p = subprocess.run(["nsenter", "-t", str(self.pid(host)), "-n", "-m", "-u", "--", *argv],
                           input=input, capture_output=True, text=True, env=env, cwd="/",
                           timeout=timeout)
        if check and p.returncode != 0:
            raise TestbedError(f"{host}: {shlex.join(argv)} failed (rc {p.returncode}): "
                               f"{(p.stderr or p.stdout).strip()}")
        return p

    def reboot(self, host: str, timeout: float = 30) -> None:
        """Power-cycle HOST: end its processes, reset its network, boot it again."""
        name = host.removeprefix("sf-")
        self._index(name)
        ns = f"sf-{name}"
        net.end_pids(net.netns_pids([ns])[ns], reap=self._reap)
        net.ip_batch([f"{verb} flush dev {d}" for d in ("ens33", "ens35") for verb in ("addr", "route")]
                     + ["link set ens33 down", "link set ens35 down"], netns=ns, force=True)
        st = self.state()
        st["pids"][name] = self._boot(name, first=False)
        self._save(st)
        self._wait_ready([name], timeout)

    def fault(self, host: str, kind: str) -> str:
        """Inject a field fault into HOST; returns what was done."""
        name = host.removeprefix("sf-")
        i = self._index(name)
        ns = f"sf-{name}"
        if kind == "stale-route":
            net.ip_batch([f"route del {net.STOR_NET} dev ens35",
                          f"route add {net.STOR_NET} dev ens33 scope link"], netns=ns, force=True)
            return f"{name}: {net.STOR_NET} now routed via ens33 (stale route)"
        if kind == "dup-ip":
            net.ip_batch([f"addr add {net.DUP_IP}/24 dev ens35"], netns=ns, force=True)
            yml = seed.netplan_yaml(i, [f"{net.DUP_IP}/24"], only="ens35")
            self.exec(name, "umask 077 && cat > /etc/netplan/99-ens35.yaml", input=yml, check=True)
            return f"{name}: {net.DUP_IP} added on ens35 and in /etc/netplan/99-ens35.yaml"
        if kind == "module-lost":
            self.exec(name, f": > {GPU_DIR}/modules", check=True)
            return f"{name}: all kernel modules unloaded (nvidia-smi now fails)"
        if kind in ENGINE_FAULTS or kind == "clear-engine-fault":
            value = None if kind == "clear-engine-fault" else kind
            code = ("import json,os,sys; p=sys.argv[1]; d=json.load(open(p)); "
                    "d['fault']=json.loads(sys.argv[2]); open(p+'.tmp','w').write(json.dumps(d)+'\\n'); "
                    "os.replace(p+'.tmp',p)")
            self.exec(name, ["/usr/bin/python3", "-I", "-S", "-c", code, SIM, json.dumps(value)], check=True)
            return f"{name}: simulated engine fault = {value}"
        raise TestbedError(f"unknown fault {kind!r} (known: {', '.join(FAULTS)})")

    # ---- inspection ----------------------------------------------------------
    def status(self) -> dict:
        """Workers, addresses, sshd alive, modules loaded, GPU memory used, faults."""
        st = self.state()
        if not st:
            return {"up": False, "leftovers": net.our_netns() + net.our_links()}
        hosts = {}
        for n in st["workers"]:
            pid = st["pids"][n]
            root = Path(f"/proc/{pid}/root")  # the host's own mount view
            ok = net.alive(pid) and net.comm(pid) == "sshd"
            per_gpu = _gpu_used(root / GPU_DIR.lstrip("/")) if ok else {}
            addrs = json.loads(net.run(["ip", "-j", "-n", f"sf-{n}", "-4", "addr", "show"]).stdout or "[]")
            hosts[n] = {
                "address": self.address(n), "storage_ip": self.storage_address(n),
                "addresses": {a["ifname"]: [f"{x['local']}/{x['prefixlen']}" for x in a["addr_info"]]
                              for a in addrs if a["ifname"] != "lo"},
                "storage_route": net.run(["ip", "-n", f"sf-{n}", "-o", "route", "show", str(net.STOR_NET)],
                                         check=False).stdout.strip(),
                "sshd_alive": ok, "sshd_pid": pid,
                "modules": net.read(root / GPU_DIR.lstrip("/") / "modules").split() if ok else [],
                "gpu_memory_used_mib": sum(per_gpu.values()),
                "gpus": len(per_gpu) or st.get("gpus", 1), "gpu_memory_used_mib_per_gpu": per_gpu,
                "engine_fault": json.loads(net.read(root / SIM.lstrip("/")) or "{}").get("fault") if ok else None,
            }
        return {"up": True, "workers": len(hosts), "bastion": net.BASTION_IP, "nfs_server": NFS_IP,
                "nfs_alive": net.alive(st["pids"].get("nfs", 0)), "inventory": st.get("inventory"),
                "up_seconds": st.get("up_seconds"), "hosts": hosts,
                "slurm": self._slurm_status(st) if st.get("scheduler") == "slurm" else None}

    def _slurm_status(self, st: dict) -> dict:
        """`sinfo -N` as the cluster reports it (text for the person) and the daemons' PIDs alive."""
        p = subprocess.run(["sinfo", "-N", "-o", "%N %P %T %G"], capture_output=True, text=True, timeout=20,
                           env=slurm.client_env(self.run_dir))
        return {"sinfo": p.stdout.rstrip() if p.returncode == 0 else "",
                "daemons": {k: net.alive(v) for k, v in st.get("slurm_pids", {}).items()},
                "slurm_conf": str(slurm.conf_path(self.run_dir))}

    def ssh(self, host: str, timeout: float = 10, user: str = "root"):
        """A connected paramiko SSHClient (strict known_hosts, TCP_NODELAY) for tests."""
        import paramiko

        addr = self.address(host)
        net.assert_mgmt_route(addr)
        c = paramiko.SSHClient()
        c.load_host_keys(str(self.known_hosts))
        c.set_missing_host_key_policy(paramiko.RejectPolicy())
        c.connect(addr, username=user, key_filename=str(self.key), timeout=timeout,
                  allow_agent=False, look_for_keys=False)
        c.get_transport().sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return c


def _gpu_used(gpu_dir: Path) -> dict[int, int]:
    """{GPU index: MiB held by live processes} of one worker's stand-in state (as its nvidia-smi)."""
    try:
        doc = json.loads(net.read(gpu_dir / "gpu.json") or "{}")
    except ValueError:
        doc = {}
    used = {int(g.get("index", k)): 0 for k, g in enumerate(doc.get("gpus") or [{}])}
    res = gpu_dir / "reservations"
    for f in res.glob("*") if res.is_dir() else []:
        if not (f.name.isdigit() and net.alive(int(f.name))):
            continue
        for tok in net.read(f).split():
            idx, _, mib = tok.rpartition(":")
            try:
                used[int(idx) if idx else 0] = used.get(int(idx) if idx else 0, 0) + int(float(mib))
            except ValueError:
                pass
    return used
