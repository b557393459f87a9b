"""Facts about the network: IPv4 addresses (the one parser of `ip -o -4 addr`), routes,
netplan files naming an address."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..quoting import q
from .base import Fact

ADDR_RE = re.compile(r"^\d+:\s+(\S+)\s+inet\s+([\d.]+)/(\d+)")


@dataclass(frozen=True)
class Address:
    iface: str   # without a veth's "@ifN" suffix
    ip: str
    prefix: int

    @property
    def cidr(self) -> str:
        return f"{self.ip}/{self.prefix}"


@dataclass(frozen=True)
class Ipv4Addresses(Fact):
    """Every IPv4 address of the host, with its interface (`ip -o -4 addr show`)."""

    def command(self) -> str:
        return "ip -o -4 addr show"

    def parse(self, stdout: str, rc: int) -> list[Address]:
        out = []
        for line in stdout.splitlines():
            m = ADDR_RE.match(line)
            if m:
                out.append(Address(m.group(1).split("@")[0], m.group(2), int(m.group(3))))
        return out


@dataclass(frozen=True)
class RouteEntry:
    line: str              # as `ip -o -4 route` printed it, stripped
    dev: str | None = None
    src: str | None = None


@dataclass(frozen=True)
class Routes(Fact):
    """The main table's IPv4 routes: all of them, or those for exactly `prefix`."""

    prefix: str = ""

    def command(self) -> str:
        exact = f" exact {q(self.prefix)}" if self.prefix else ""
        return f"ip -o -4 route show{exact} table main"

    def parse(self, stdout: str, rc: int) -> list[RouteEntry]:
        out = []
        for line in stdout.splitlines():
            if line.strip():
                dev, src = re.search(r"\bdev (\S+)", line), re.search(r"\bsrc (\S+)", line)
                out.append(RouteEntry(line.strip(), dev and dev.group(1), src and src.group(1)))
        return out


@dataclass(frozen=True)
class NetplanFilesWith(Fact):
    """The /etc/netplan/*.yaml files whose text holds `text` (e.g. "192.168.160.179/24")."""

    text: str
    needs_root = True  # netplan files are 0600

    def command(self) -> str:
        # a link is never read through (facts/files.py)
        return (f"for f in /etc/netplan/*.yaml; do [ -L \"$f\" ] || grep -lF -- {q(self.text)} \"$f\" "
                "2>/dev/null; done; true")

    def parse(self, stdout: str, rc: int) -> list[str]:
        return [ln for ln in stdout.split("\n") if ln]
