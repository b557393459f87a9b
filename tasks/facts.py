"""`fab facts`: what every host looks like, gathered in one pass."""
from __future__ import annotations

from invoke import task
from rich.table import Table

from specfleet.roles.host_facts import HostFacts
from specfleet.tasks.common import fleet_help, fleet_run


def gpu_cell(data: dict) -> str:
    """One line per GPU (index, name, memory), then the NVLink/PCIe links, or why none are known."""
    out = []
    if data["gpu_error"] and data["gpus_source"] == "nvidia-smi":
        out.append(f"NOT VISIBLE: {data['gpu_error'][:80]}")
    for g in data["gpus"]:
        mem = f"{g['memory_total_mib']} MiB" if g["memory_total_mib"] is not None else "? MiB"
        used = f", {g['memory_used_mib']} used" if g.get("memory_used_mib") is not None else ""
        out.append(f"{g['index']}: {g['name']} {mem}{used}")
    if data["gpus_source"] == "inventory":
        out.append("(from the inventory's gpus)")
    if data["topology"]:
        kinds: dict[str, list[str]] = {}
        for ln in data["topology"]:
            kinds.setdefault(ln["kind"], []).append(f"{ln['a']}-{ln['b']}")
        out += [f"{k}: {' '.join(pairs)}" for k, pairs in sorted(kinds.items())]
    return "\n".join(out) or "-"


def venv_cell(fleet, host: str, venv: dict | None) -> str:
    """The venv's Python, or MISSING (and the host is not ready in the recap: a campaign needs it)."""
    if venv is None:
        return "- (no venv_path)"
    if venv["python"]:
        return f"{venv['path']} (Python {venv['python']})"
    fleet.note_not_ready(host, f"no venv at {venv['path']} (`fab provision` builds and places it)")
    return f"MISSING: {venv['path']}"


@task(help=fleet_help(changes=False))
def facts(c, inventory=None, hosts=None, forks=32, serial=False, accept_new_host_keys=False, verbose=False):
    """Gather OS, kernel, interfaces, routes and GPU state from every host (one round trip each)."""
    with fleet_run("facts", inventory=inventory, hosts=hosts, forks=forks, serial=serial,
                   accept_new_host_keys=accept_new_host_keys, verbose=verbose, all_hosts=True) as (fleet, inv, rep):
        results = fleet.play(lambda host: [HostFacts(host.var("gpus"), venv=host.var("venv_path"))])
        table = Table(title="facts", title_justify="left")
        for col in ("host", "os", "kernel", "IPv4 addresses", "routes", "GPUs", "venv"):
            table.add_column(col, overflow="fold")
        for host in fleet.hosts:
            outcome = results.get(host.name)
            data = outcome.results[0].data if outcome and outcome.results[0].data else None
            if not data:
                table.add_row(host.name, "-", "-", "-", "-", "unreachable", "-")
                continue
            table.add_row(host.name, data["os"], data["kernel"],
                          "\n".join(f"{a['iface']} {a['cidr']}" for a in data["addresses"]),
                          "\n".join(data["routes"]), gpu_cell(data), venv_cell(fleet, host.name, data["venv"]))
        rep.console.print(table)
