"""Steps for the network: a route through the right device."""
from __future__ import annotations

import ipaddress
import re

from ..shell import q
from ..step import Change, Facts, Step, StepFailed


class Route(Step):
    """`prefix` reaches the host through `dev` (scope link, optional `src`), and no other device.

    The field report's failure: after a reboot `192.168.160.0/24 dev ens33 scope
    link` sent storage traffic to the management NIC, and NFS timed out on ARP.
    Routes are compared on prefix, device and src, not the whole line: a route
    added by hand lacks `proto kernel` and is just as right.
    """

    def __init__(self, prefix: str, dev: str, src: str | None = None):
        self.prefix = str(ipaddress.IPv4Network(prefix))
        self.dev, self.src = dev, src
        self.name = f"route {self.prefix} dev {dev}"

    def probe(self) -> str:
        return (f"ip -o -4 route show exact {q(self.prefix)} table main; echo '--addr'; "
                f"ip -o -4 addr show dev {q(self.dev)}")

    def parse(self, facts: Facts) -> tuple[list[str], list[str]]:
        routes, addrs, into = [], [], "routes"
        for line in facts.lines:
            if line == "--addr":
                into = "addrs"
                continue
            (routes if into == "routes" else addrs).append(line.strip())
        return routes, addrs

    def decide(self, facts: Facts) -> list[Change]:
        routes, addrs = self.parse(facts)
        if not addrs:
            raise StepFailed(f"interface {self.dev} has no IPv4 address (or does not exist); "
                             "check the storage NIC before fixing its route")
        if self.src and not any(f" {self.src}/" in f" {a.split('inet ', 1)[-1]}" for a in addrs):
            raise StepFailed(f"{self.src} is not an address of {self.dev}; check storage_ip in the inventory")
        good = [r for r in routes if _dev(r) == self.dev and (not self.src or _src(r) in (None, self.src))]
        wrong = [r for r in routes if r not in good]
        changes = []
        for r in wrong:
            changes.append(Change(f"delete stale route '{r}'",
                                  f"ip route del {q(self.prefix)} dev {q(_dev(r) or self.dev)}",
                                  f"-{r}"))
        if not good:
            want = f"{self.prefix} dev {self.dev} scope link" + (f" src {self.src}" if self.src else "")
            cmd = f"ip route add {q(self.prefix)} dev {q(self.dev)} scope link"
            if self.src:
                cmd += f" src {q(self.src)}"
            changes.append(Change(f"add route '{want}'", cmd, f"+{want}"))
        return changes


def _dev(route: str) -> str | None:
    m = re.search(r"\bdev (\S+)", route)
    return m.group(1) if m else None


def _src(route: str) -> str | None:
    m = re.search(r"\bsrc (\S+)", route)
    return m.group(1) if m else None
