"""A node's GPU sets on the bastion: the inventory's `gpus` and `gpu_groups` read (split.py), and the
runner's pool simulated for the split (NodeSim, slotsplit.py). The rule the simulation follows is the
worker's own, slots.admit (specfleet/worker/slots.py): written once, used by both sides."""
from __future__ import annotations

import heapq

from ...worker.slots import admit, fits_ever


def parse_gpus(value, where: str) -> list[dict]:
    """A node's GPUs: a count N (indices 0..N-1, UUIDs read on the worker) or a list of
    {index?, uuid?, name, memory_mib} (the inventory's `gpus`, indexed in list order; `fab facts`). ValueError names `where`
    (when given: the inventory's own error already names file, host and field)."""
    where = f"{where}: " if where else ""
    if isinstance(value, bool):
        raise ValueError(f"{where}gpus must be a count or a list of GPUs, not {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"{where}gpus must be at least 1, not {value}")
        return [{"index": i} for i in range(value)]
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}gpus must be a count or a non-empty list of {{index, uuid, name}}")
    out, seen = [], set()
    for pos, g in enumerate(value):
        if isinstance(g, dict) and "index" not in g:  # the inventory's list: indexed in list order
            g = {"index": pos, **g}
        if not isinstance(g, dict) or isinstance(g.get("index"), bool) or not isinstance(g.get("index"), int) \
                or g["index"] < 0:
            raise ValueError(f"{where}each GPU needs an integer index >= 0, not {g!r}")
        bad = set(g) - {"index", "uuid", "name", "memory_mib"}
        if bad:
            raise ValueError(f"{where}GPU {g['index']}: unknown key(s) {', '.join(sorted(bad))}")
        for k in ("uuid", "name"):
            if k in g and (not isinstance(g[k], str) or not g[k].strip() or any(c in g[k] for c in ",\n\0")):
                raise ValueError(f"{where}GPU {g['index']}: {k} must be one line without commas, not {g[k]!r}")
        if g["index"] in seen:
            raise ValueError(f"{where}GPU index {g['index']} is listed twice")
        seen.add(g["index"])
        out.append(dict(g))
    return sorted(out, key=lambda g: g["index"])


def parse_groups(value, indices: list[int], where: str) -> list[list[int]] | None:
    """The inventory's `gpu_groups`: lists of GPU indices joined by NVLink/NVSwitch; a server with
    several GPUs gets them inside one group. None: no topology known, any set will do."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(g, list) and g for g in value):
        raise ValueError(f"{where}: gpu_groups must be a list of lists of GPU indices")
    flat = [i for g in value for i in g]
    if any(isinstance(i, bool) or not isinstance(i, int) for i in flat) or len(set(flat)) != len(flat):
        raise ValueError(f"{where}: gpu_groups must list each GPU index once")
    unknown = sorted(set(flat) - set(indices))
    if unknown:
        raise ValueError(f"{where}: gpu_groups names GPU(s) {unknown} that gpus does not list")
    return [sorted(g) for g in value]


def simulate(items: list[tuple], gpus: list[int], groups: list[list[int]] | None = None,
             packing: str = "shared", checked: bool = False) -> tuple[float, dict[str, tuple[float, list[int]]]]:
    """(busy time, {name: (start, gpu set)}) of a node running `items` ((name, need, seconds), queue
    order; a 4th element, when not None, is the one GPU index it is pinned to: item["gpu_pin"]):
    NodeSim.run, the one simulated pool. A `need` larger than the node (or any group) raises ValueError;
    checked=True: the caller has checked that already."""
    if not checked:
        for it in items:
            name, need, pin = it[0], it[1], it[3] if len(it) > 3 else None
            if pin is not None and pin not in gpus:
                raise ValueError(f"{name} is pinned to GPU {pin}; the node has {sorted(gpus)}")
            if not fits_ever(need, gpus, groups):
                raise ValueError(f"{name} needs {need} GPU(s) in one group; the node has {len(gpus)}"
                                 + (f" in groups {groups}" if groups else ""))
    sim = NodeSim(gpus, groups, packing)
    starts: list = []
    end = sim.run([sim.row(it[1], it[2], it[3] if len(it) > 3 else None) for it in items], starts)
    return end, {items[k][0]: (t, sim.indices_of(got)) for k, t, got in starts}


class NodeSim:
    """The one simulated pool: a node running its queue as the worker's Runner.pool does (at each
    moment every pending item that the admission rule, slots.admit, places starts, in queue order;
    exclusive = one at a time; a one-GPU node is a node of one slot). The split simulates the same
    node thousands of times, so the GPU sets are bit masks and admit's answer for each (free set,
    need, pin) is asked once and kept in a table. Items are rows (need, seconds, pin: 0 unpinned,
    else 1 + the pinned GPU's position): row(). tests/campaign/test_pool_vs_runner.py runs the
    worker's own pool on the same queues."""

    def __init__(self, gpus: list[int], groups: list[list[int]] | None = None, packing: str = "shared"):
        self.indices = sorted(gpus)
        self.bit = {g: 1 << k for k, g in enumerate(self.indices)}
        self.full = (1 << len(self.indices)) - 1
        self.groups = [list(g) for g in groups] if groups else None
        self.exclusive = packing == "exclusive"
        self.table: dict[int, int] = {}   # free mask << 16 | pin << 8 | need -> the granted mask, 0: it waits

    def row(self, need: int, seconds: float, pin: int | None = None) -> tuple[int, float, int]:
        return need, seconds, 0 if pin is None else 1 + self.indices.index(pin)

    def indices_of(self, mask: int) -> list[int]:
        return [g for g in self.indices if mask & self.bit[g]]

    def grant(self, key: int) -> int:
        free, pin, need = key >> 16, (key >> 8) & 0xFF, key & 0xFF
        got = admit(need, self.indices[pin - 1] if pin else None, self.indices_of(free), self.groups)
        mask = 0 if got is None else sum(self.bit[g] for g in got)
        self.table[key] = mask
        return mask

    def run(self, rows: list[tuple[int, float, int]], starts: list | None = None) -> float:
        """The node's busy time; `starts`, when given, gets (row position, start, granted mask) per item."""
        t, free, running, pending = 0.0, self.full, [], list(enumerate(rows))
        table, exclusive, push, pop = self.table, self.exclusive, heapq.heappush, heapq.heappop
        while pending or running:
            if free and not (exclusive and running):
                waiting = []
                for k, (pos, (need, seconds, pin)) in enumerate(pending):
                    key = free << 16 | pin << 8 | need
                    got = table.get(key)
                    if got is None:
                        got = self.grant(key)
                    if got:
                        push(running, (t + seconds, got))
                        if starts is not None:
                            starts.append((pos, t, got))
                        free ^= got
                        if not free or exclusive:
                            waiting.extend(pending[k + 1:])
                            break
                    else:
                        waiting.append(pending[k])
                pending = waiting
            t = running[0][0]
            while running and running[0][0] <= t + 1e-9:
                free |= pop(running)[1]
        return t
