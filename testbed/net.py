"""Names, addresses and the few `ip` / process helpers the testbed needs.

Everything the testbed creates is named `sf-*`; nothing here ever looks at,
changes or deletes an object without that prefix (eth0 and the default route
are never touched).
"""
from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

PREFIX = "sf-"
BR_MGMT = "sf-br-mgmt"
BR_STOR = "sf-br-stor"
NFS_NS = "sf-nfs"
MGMT_NET = ipaddress.ip_network("10.10.30.0/24")
STOR_NET = ipaddress.ip_network("192.168.160.0/24")
BASTION_IP = "10.10.30.1"
NFS_IP = "192.168.160.7"
DUP_IP = "192.168.160.179"  # the address the field report found on two hosts
MAX_WORKERS = 64  # keeps .13+I clear of .179 and inside the /24
NETNS_DIR = Path("/run/netns")


class TestbedError(RuntimeError):
    """Something the operator must fix; the message says what."""

    __test__ = False  # not a pytest test class, despite the name


def mgmt_ip(i: int) -> str:
    return f"10.10.30.{13 + i}"


def stor_ip(i: int) -> str:
    return f"192.168.160.{13 + i}"


def run(cmd: list[str], *, input: str | None = None, check: bool = True,
        timeout: float = 30) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise TestbedError(f"{' '.join(cmd)} failed (rc {p.returncode}): {p.stderr.strip()}")
    return p


def ip_batch(lines: list[str], netns: str | None = None, force: bool = False) -> None:
    """Run many `ip` commands in one process (one fork instead of hundreds)."""
    if not lines:
        return
    cmd = ["ip"] + (["-n", netns] if netns else []) + (["-force"] if force else []) + ["-batch", "-"]
    run(cmd, input="\n".join(lines) + "\n", check=not force)


def our_netns() -> list[str]:
    if not NETNS_DIR.is_dir():
        return []
    return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(PREFIX))


def our_links() -> list[str]:
    out = json.loads(run(["ip", "-j", "link", "show"]).stdout or "[]")
    return [l["ifname"] for l in out if l["ifname"].startswith(PREFIX)]


def conflicts() -> list[str]:
    """Root-namespace addresses/routes in the testbed nets that are not ours."""
    problems = []
    for a in json.loads(run(["ip", "-j", "-4", "addr", "show"]).stdout or "[]"):
        for info in a.get("addr_info", []):
            addr = ipaddress.ip_address(info["local"])
            if addr in MGMT_NET or addr in STOR_NET:
                problems.append(f"address {addr} on {a['ifname']}")
    for r in json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]"):
        dst = r.get("dst", "")
        if dst in ("default", "") or r.get("type") in ("local", "broadcast"):
            continue
        net = ipaddress.ip_network(dst if "/" in dst else dst + "/32", strict=False)
        if r.get("type") == "unreachable" and net == STOR_NET:
            continue  # somebody's own guard: fine, we simply do not add ours
        if net.overlaps(MGMT_NET) or net.overlaps(STOR_NET):
            problems.append(f"route {dst} {r.get('dev') or r.get('type', '')}".strip())
    return problems


def has_unreachable_stor_route() -> bool:
    out = run(["ip", "-j", "-4", "route", "show", "type", "unreachable", str(STOR_NET)]).stdout
    return bool(json.loads(out or "[]"))


def route_devs(addrs: list[str]) -> dict[str, str | None]:
    """`ip route get` from the root namespace for many addresses in one call."""
    p = run(["ip", "-force", "-o", "-batch", "-"], check=False,
            input="".join(f"route get {a}\n" for a in addrs))
    devs: dict[str, str | None] = {a: None for a in addrs}
    for line in p.stdout.splitlines():
        words = line.split()
        if words and words[0] in devs and "dev" in words:
            devs[words[0]] = words[words.index("dev") + 1]
    return devs


def assert_mgmt_route(*addrs: str) -> None:
    """Refuse to talk to any address the root namespace would not send via sf-br-mgmt.

    Guards against ever sending testbed traffic out of eth0 (e.g. to a real
    192.168.160.x storage network), whatever the inventory or a test says.
    """
    for addr, dev in route_devs(list(addrs)).items():
        if dev != BR_MGMT:
            raise TestbedError(
                f"refusing to connect to {addr}: the root namespace routes it via "
                f"{dev or 'nothing (unreachable)'}, not {BR_MGMT}"
            )


def netns_pids(names: list[str]) -> dict[str, list[int]]:
    """PIDs per namespace, found like `ip netns pids` does (inode of /proc/PID/ns/net)."""
    ino = {}
    for n in names:
        try:
            st = os.stat(NETNS_DIR / n)
            ino[(st.st_dev, st.st_ino)] = n
        except OSError:
            pass
    found: dict[str, list[int]] = {n: [] for n in names}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue  # gone, or a zombie
        n = ino.get((st.st_dev, st.st_ino))
        if n:
            found[n].append(int(entry))
    return found


def alive(pid: int) -> bool:
    """True if PID runs (a zombie counts as dead: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def end_pids(pids: list[int], grace: float = 2.0, reap=None) -> None:
    """TERM the given PIDs, KILL whatever still runs after `grace` seconds."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while True:
        if reap:
            reap()
        left = [p for p in pids if alive(p)]
        if not left:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 2.0
    while any(alive(p) for p in left) and time.monotonic() < deadline:
        if reap:
            reap()
        time.sleep(0.02)


# ---- small probes used by the controller ---------------------------------

def accepts(addr: str, port: int) -> bool:
    """TCP connect (callers run assert_mgmt_route first)."""
    try:
        socket.create_connection((addr, port), timeout=0.5).close()
        return True
    except OSError:
        return False


def listening(pid: int, port: int) -> bool:
    try:
        rows = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    return any(r.split()[1].endswith(f":{port:04X}") and r.split()[3] == "0A" for r in rows)


def comm(pid: int) -> str:
    return read(Path(f"/proc/{pid}/comm")).strip()


def read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def gpu_used(res: Path) -> int:
    total = 0
    for f in res.glob("*") if res.is_dir() else []:
        if f.name.isdigit() and alive(int(f.name)):
            total += int(read(f).strip() or 0)
    return total


def tail(path: Path, n: int = 5) -> str:
    return " | ".join(read(path).strip().splitlines()[-n:]) or "(no output)"
