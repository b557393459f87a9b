"""network: find IPv4 addresses held by two hosts (field report: 192.168.160.179 on two workers).

Linux does no duplicate address detection for IPv4 (`ip addr add` succeeds
silently), so the check is explicit: every host's addresses, gathered in the
same round trip as the other provision probes, grouped by address. Reporting
is the default; removing an address is an explicit choice of host.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from specfleet.fleet import Outcomes
from specfleet.facts.net import Address, Ipv4Addresses, NetplanFilesWith
from specfleet.shell import q
from specfleet.step import Change, Step, StepFailed, Values
from specfleet.roles import Context, Role

# loopback and link-local repeat on every host by design
IGNORED = [ipaddress.IPv4Network("127.0.0.0/8"), ipaddress.IPv4Network("169.254.0.0/16")]


class Addresses(Step):
    """Changes nothing; reports the host's IPv4 addresses with their interfaces."""

    name = "ipv4 addresses"

    def facts(self) -> dict:
        return {"addresses": Ipv4Addresses()}

    def report(self, facts: Values) -> dict:
        return {"addresses": [address_record(a) for a in facts["addresses"]]}


def address_record(a: Address) -> dict:
    """An address as the run's data carries it (event log, duplicate detection)."""
    return {"iface": a.iface, "ip": a.ip, "prefix": a.prefix}


@dataclass
class Duplicate:
    ip: str
    holders: list[tuple[str, str, int]]  # (host, iface, prefix)


def find_duplicates(addresses: dict[str, list[dict]]) -> list[Duplicate]:
    by_ip: dict[str, list[tuple[str, str, int]]] = {}
    for host, addrs in addresses.items():
        for a in addrs:
            ip = ipaddress.IPv4Address(a["ip"])
            if any(ip in net for net in IGNORED):
                continue
            by_ip.setdefault(a["ip"], []).append((host, a["iface"], a["prefix"]))
    return [Duplicate(ip, sorted(h)) for ip, h in sorted(by_ip.items()) if len({x[0] for x in h}) > 1]


# Removes `- IP/PREFIX` from netplan address lists, block or inline form, with
# the host's python3 (stdlib only) so no YAML library is needed on the worker.
_NETPLAN_EDIT = r'''
import re, sys, glob
addr = sys.argv[1]
for path in sorted(glob.glob("/etc/netplan/*.yaml")):
    text = open(path).read()
    new = re.sub(r"(?m)^[ \t]*-[ \t]*[\"']?" + re.escape(addr) + r"[\"']?[ \t]*\n", "", text)
    new = re.sub(r"[\"']?" + re.escape(addr) + r"[\"']?[ \t]*,[ \t]*|,[ \t]*[\"']?" + re.escape(addr) + r"[\"']?(?=[ \t]*\])", "", new)
    if new != text:
        open(path, "w").write(new)
        print(path)
'''


class RemoveAddress(Step):
    """Take `ip/prefix` off `iface`, and out of the netplan file that adds it."""

    probe_needs_root = True

    def __init__(self, ip: str, prefix: int, iface: str):
        self.ip, self.prefix, self.iface = ip, prefix, iface
        self.name = f"remove {ip}/{prefix} from {iface}"

    def facts(self) -> dict:
        return {"addresses": Ipv4Addresses(), "netplan": NetplanFilesWith(f"{self.ip}/{self.prefix}")}

    def decide(self, facts: Values) -> list[Change]:
        changes = []
        if any(a.iface == self.iface and a.ip == self.ip for a in facts["addresses"]):
            changes.append(Change(f"ip addr del {self.ip}/{self.prefix} dev {self.iface}",
                                  f"ip addr del {q(f'{self.ip}/{self.prefix}')} dev {q(self.iface)}",
                                  f"-{self.ip}/{self.prefix} dev {self.iface}"))
        files = facts["netplan"]
        if files:
            changes.append(Change(f"remove {self.ip}/{self.prefix} from {', '.join(files)}",
                                  f"python3 -c {q(_NETPLAN_EDIT)} {q(f'{self.ip}/{self.prefix}')}",
                                  "\n".join(f"{f}: -{self.ip}/{self.prefix}" for f in files)))
        return changes


def removal_steps(host: str, dups: list[Duplicate]) -> list[Step]:
    steps: list[Step] = [RemoveAddress(d.ip, prefix, iface)
                         for d in dups for h, iface, prefix in d.holders if h == host]
    if not steps:
        raise StepFailed(f"{host} holds none of the duplicate addresses")
    return steps


def report_duplicates(ctx: Context, outcomes: Outcomes) -> None:
    """After the play: a table of the duplicates, a warning; removal only from the host the option names."""
    from rich.table import Table

    from specfleet.errors import UserError
    fleet, remove_host = ctx.fleet, ctx.options.get("remove_dup_ip")
    addrs = {h: r.data["addresses"] for h, o in outcomes.items() for r in o.results if "addresses" in r.data}
    dups = find_duplicates(addrs)
    if not dups:
        ctx.console.print("[green]network: no IPv4 address is held by two hosts[/]")
    else:
        table = Table(title="DUPLICATE IPv4 ADDRESSES (ARP conflicts: fix before benchmarking)",
                      title_justify="left", title_style="bold red")
        table.add_column("address")
        table.add_column("held by")
        for d in dups:
            table.add_row(d.ip, ", ".join(f"{h} ({i})" for h, i, _ in d.holders))
        ctx.console.print(table)
        fleet.warn("duplicate IPv4 addresses: " + "; ".join(
            f"{d.ip} on {', '.join(h for h, _, _ in d.holders)}" for d in dups))
    if remove_host:
        targets = [h for h in fleet.hosts if h.name == remove_host]
        if not targets:
            raise UserError(f"--remove-dup-ip {remove_host}: not a selected host")
        fleet.play(lambda h: removal_steps(h.name, dups), hosts=targets)


ROLE = Role(
    name="network",
    summary="find IPv4 addresses held by two hosts (reported; removed only with --remove-dup-ip HOST)",
    steps=lambda host, ctx: [Addresses()],
    order=60,
    after=report_duplicates,
)
