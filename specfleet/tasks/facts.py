"""`fab facts`: what every host looks like, gathered in one pass."""
from __future__ import annotations

from invoke import task
from rich.table import Table

from specfleet.roles.facts import HostFacts
from specfleet.tasks.common import fleet_help, fleet_run


@task(help=fleet_help(changes=False))
def facts(c, inventory=None, hosts=None, forks=32, serial=False, accept_new_host_keys=False, verbose=False):
    """Gather OS, kernel, interfaces, routes and GPU state from every host (one round trip each)."""
    with fleet_run("facts", inventory=inventory, hosts=hosts, forks=forks, serial=serial,
                   accept_new_host_keys=accept_new_host_keys, verbose=verbose) as (fleet, inv, rep):
        results = fleet.play(lambda host: [HostFacts()])
        table = Table(title="facts", title_justify="left")
        for col in ("host", "os", "kernel", "IPv4 addresses", "routes", "GPU"):
            table.add_column(col, overflow="fold")
        for host in fleet.hosts:
            rs = results.get(host.name) or []
            data = rs[0].data if rs and rs[0].data else None
            if not data:
                table.add_row(host.name, "-", "-", "-", "-", "unreachable")
                continue
            table.add_row(host.name, data["os"], data["kernel"],
                          "\n".join(f"{a['iface']} {a['cidr']}" for a in data["addresses"]),
                          "\n".join(data["routes"]), data["gpu"])
        rep.console.print(table)
