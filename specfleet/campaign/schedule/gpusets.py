"""A node's GPU sets on the bastion: the inventory's `gpus` and `gpu_groups` read (split.py), and the
runner's pool simulated for the split (slotsplit.py). The rule the simulation follows is the worker's
own, slots.admit and slots.pick (specfleet/worker/slots.py): written once, used by both sides."""
from __future__ import annotations

import heapq

from ...worker.slots import admit, fits_ever, pick


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
    order; a 4th element, when not None, is the one GPU index it is pinned to: item["gpu_pin"]) as
    the runner's pool does: at each moment every pending item that fits starts, in queue order; exclusive = one
    at a time. A `need` larger than the node (or any group) raises ValueError;
    checked=True: the caller has checked that already (the split simulates the same items thousands
    of times)."""
    if not checked:
        for it in items:
            name, need, pin = it[0], it[1], it[3] if len(it) > 3 else None
            if pin is not None and pin not in gpus:
                raise ValueError(f"{name} is pinned to GPU {pin}; the node has {sorted(gpus)}")
            if not fits_ever(need, gpus, groups):
                raise ValueError(f"{name} needs {need} GPU(s) in one group; the node has {len(gpus)}"
                                 + (f" in groups {groups}" if groups else ""))
    gkey = tuple(map(tuple, groups)) if groups else None
    t, running, starts = 0.0, [], {}   # running: a heap of (end, name, gpu set)
    pending, free = list(items), tuple(sorted(gpus))
    exclusive = packing == "exclusive"
    while pending or running:
        waiting = []
        for k, it in enumerate(pending):
            if exclusive and running or not free:
                waiting.extend(pending[k:])
                break
            got = admit(it[1], it[3] if len(it) > 3 else None, free, gkey, _pick_cached)
            if got is None:
                waiting.append(it)
                continue
            heapq.heappush(running, (t + it[2], it[0], got))
            starts[it[0]] = (t, got)
            free = tuple(i for i in free if i not in got)
        pending = waiting
        t = running[0][0]
        back = []
        while running and running[0][0] <= t + 1e-9:
            back.extend(heapq.heappop(running)[2])
        free = tuple(sorted(free + tuple(back)))
    return t, starts


_PICKS: dict = {}


def _pick_cached(free: tuple, need: int, groups: tuple | None) -> list[int] | None:
    """pick() for simulate's hot loop: a node has few GPUs, so few (free set, need) pairs recur."""
    key = (free, need, groups)
    if key not in _PICKS:
        if len(_PICKS) > 100_000:
            _PICKS.clear()
        got = pick(list(free), need, [list(g) for g in groups] if groups else None)
        _PICKS[key] = None if got is None else tuple(got)
    got = _PICKS[key]
    return None if got is None else list(got)


class NodeSim:
    """simulate()'s busy time for one node, for the split's search, which simulates the same node
    thousands of times: the GPU sets are bit masks, the admission rule's answer for each (free set,
    need) is asked once (admit/pick, so the rule stays the worker's) and kept in a table, and only
    the end is computed. Items are (need, seconds, pin mask: 0 unpinned, else the pinned GPU's bit)
    rows (row()). The same end as simulate() on every queue (tests/campaign/test_split_sim.py)."""

    def __init__(self, gpus: list[int], groups: list[list[int]] | None = None, packing: str = "shared"):
        self.indices = sorted(gpus)
        self.bit = {g: 1 << k for k, g in enumerate(self.indices)}
        self.full = (1 << len(self.indices)) - 1
        self.groups = [list(g) for g in groups] if groups else None
        self.exclusive = packing == "exclusive"
        self.table: dict[int, int] = {}   # free mask << 8 | need -> the granted mask, 0: it waits

    def row(self, need: int, seconds: float, pin: int | None = None) -> tuple[int, float, int]:
        return need, seconds, 0 if pin is None else self.bit[pin]

    def grant(self, free: int, need: int) -> int:
        ids = [g for g in self.indices if free & self.bit[g]]
        got = admit(need, None, ids, self.groups)
        mask = 0 if got is None else sum(self.bit[g] for g in got)
        self.table[free << 8 | need] = mask
        return mask

    def end(self, rows: list[tuple[int, float, int]]) -> float:
        t, free, running, pending = 0.0, self.full, [], rows
        table, exclusive, push, pop = self.table, self.exclusive, heapq.heappush, heapq.heappop
        while pending or running:
            if free and not (exclusive and running):
                waiting = []
                for k, it in enumerate(pending):
                    need, seconds, pin = it
                    if pin:
                        got = pin & free
                    else:
                        got = table.get(free << 8 | need)
                        if got is None:
                            got = self.grant(free, need)
                    if got:
                        push(running, (t + seconds, got))
                        free ^= got
                        if not free or exclusive:
                            waiting.extend(pending[k + 1:])
                            break
                    else:
                        waiting.append(it)
                pending = waiting
            t = running[0][0]
            while running and running[0][0] <= t + 1e-9:
                free |= pop(running)[1]
        return t
