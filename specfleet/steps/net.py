"""Steps for the network: a route through the right device."""
from __future__ import annotations

import ipaddress

from ..facts.net import Ipv4Addresses, Routes
from ..shell import q
from ..step import Change, Step, StepFailed, Values


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

    def facts(self) -> dict:
        return {"routes": Routes(self.prefix), "addresses": Ipv4Addresses()}

    def decide(self, facts: Values) -> list[Change]:
        routes = facts["routes"]
        addrs = [a for a in facts["addresses"] if a.iface == self.dev]
        if not addrs:
            raise StepFailed(f"interface {self.dev} has no IPv4 address (or does not exist); "
                             "check the storage NIC before fixing its route")
        if self.src and not any(a.ip == self.src for a in addrs):
            raise StepFailed(f"{self.src} is not an address of {self.dev}; check storage_ip in the inventory")
        good = [r for r in routes if r.dev == self.dev and (not self.src or r.src in (None, self.src))]
        changes = [Change(f"delete stale route '{r.line}'",
                          f"ip route del {q(self.prefix)} dev {q(r.dev or self.dev)}", f"-{r.line}")
                   for r in routes if r not in good]
        if not good:
            want = f"{self.prefix} dev {self.dev} scope link" + (f" src {self.src}" if self.src else "")
            cmd = f"ip route add {q(self.prefix)} dev {q(self.dev)} scope link"
            if self.src:
                cmd += f" src {q(self.src)}"
            changes.append(Change(f"add route '{want}'", cmd, f"+{want}"))
        return changes
