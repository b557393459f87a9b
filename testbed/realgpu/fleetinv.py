#!/usr/bin/env python3
"""The controller's inventory for one node of the lent GPU machine (fleet.sh; docs/engines-gpu.md).

    python3 fleetinv.py TEMPLATE NODE OUT [--datasets-root DIR]
    python3 fleetinv.py --campaign PLAN        (prints the plan's campaign name)
    python3 fleetinv.py --gpu                  (prints the GPU nvidia-smi names and the product's look-up)

The template (`testbed/realgpu/fleet/inventory.yml`) describes the worker that every lent machine is
(the device itself, on loopback); the node's name is given per machine (w1 on the first machine, w2 on
the next), so a campaign folder can hold both. Nothing here fixes the GPU's bandwidth: the report looks
it up from the GPU name the worker reports (an explicit `gpu_memory_bandwidth_gbps` in the template is
refused: it would be one figure for every kind of machine).
Stdlib and PyYAML only (the device image's python has both).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

#: a node name becomes a folder, a host key and an SSH alias: letters, digits, '-', '_'
NODE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}\Z")


class InventoryError(ValueError):
    pass


def node_inventory(template: dict, node: str, datasets_root: str | None = None) -> dict:
    """The template with its one host renamed to `node` (address and fields kept), in every group."""
    if not NODE_RE.match(node):
        raise InventoryError(f"node {node!r}: a node name is a letter then letters, digits, '-' or '_' (e.g. w1, w2)")
    inv = dict(template)
    hosts = inv.get("hosts") or {}
    if len(hosts) != 1:
        raise InventoryError(f"hosts: the template describes one worker (the lent machine), not {len(hosts)}")
    (old, fields), = hosts.items()
    for scope in ("all", "bastion"):
        if "gpu_memory_bandwidth_gbps" in ((inv.get(scope) or {}).get("vars") or {}):
            raise InventoryError(f"{scope}.vars.gpu_memory_bandwidth_gbps: the lent machine may be an H100 or an "
                                 "H200; leave it out and the report looks the bandwidth up from the GPU name")
    if "gpu_memory_bandwidth_gbps" in ((fields or {}).get("vars") or {}):
        raise InventoryError(f"hosts.{old}.vars.gpu_memory_bandwidth_gbps: leave it out (see all.vars)")
    inv["hosts"] = {node: fields}
    inv["groups"] = {g: {**spec, "hosts": [node if h == old else h for h in spec.get("hosts", [])]}
                     for g, spec in (inv.get("groups") or {}).items()}
    if datasets_root:  # the template's datasets are relative to it; the controller's copy names the snapshot's
        b = inv.get("bastion") or {}
        v = dict(b.get("vars") or {})
        v["datasets"] = [re.sub(r"^(\.\./)+datasets/", f"{datasets_root}/", d) for d in v.get("datasets", [])]
        inv["bastion"] = {**b, "vars": v}
    return inv


def campaign_of(plan: Path) -> str:
    name = (yaml.safe_load(plan.read_text()) or {}).get("campaign")
    if not isinstance(name, str) or not NODE_RE.match(name):
        raise InventoryError(f"{plan}: campaign: missing or not a folder name")
    return name


def gpu_line() -> str:
    """What the device reports (nvidia-smi) and the product's datasheet look-up for it."""
    try:
        names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=30).stdout.split("\n")
    except (OSError, subprocess.SubprocessError) as e:
        return f"GPU: not read ({e})"
    names = [n.strip() for n in names if n.strip()]
    try:  # the controller's snapshot of specfleet (fleet.sh puts it on PYTHONPATH)
        from specfleet.report.tables.diagnosis import bandwidth_of
    except ImportError:
        bandwidth_of = None  # type: ignore[assignment]
    looked = [bandwidth_of(n) if bandwidth_of else None for n in names]
    said = [f"{n}: {f'{b[0]:g} GB/s ({b[1]})' if b else 'not in the look-up'}" for n, b in zip(names, looked)]
    return "GPU: " + ("; ".join(said) if said else "none listed by nvidia-smi")


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["--campaign"] and len(argv) == 2:
            print(campaign_of(Path(argv[1])))
        elif argv == ["--gpu"]:
            print(gpu_line())
        elif len(argv) in (3, 5) and (len(argv) == 3 or argv[3] == "--datasets-root"):
            inv = node_inventory(yaml.safe_load(Path(argv[0]).read_text()), argv[1],
                                 argv[4] if len(argv) == 5 else None)
            Path(argv[2]).write_text(yaml.safe_dump(inv, sort_keys=False))
        else:
            print(__doc__.split("\n\n")[1], file=sys.stderr)
            return 2
    except (InventoryError, OSError, yaml.YAMLError) as e:
        print(f"fleetinv: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
