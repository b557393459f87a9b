"""GPU slots: what a configuration needs, which GPUs of a node it gets, several servers at once.

Stdlib only: part of the worker program (runner.pyz); the bastion's split and plan
checks import the same functions, so the GPU count a configuration needs has one definition.

    needed(argv)               GPUs one `vllm serve` argv uses: tensor x pipeline x data parallel size
    pick(free, need, groups)   the GPU set it gets: contiguous indices inside one NVLink group first
    admit(need, pin, free, ...) the admission rule (pinned GPU, else pick), one for the pool and simulate
    simulate(items, gpus, ...) the node's busy time when its queue runs the way the runner's pool runs it
    check_gpus(want, seen)     the spec's GPUs checked against nvidia-smi's (runner.py, before any server)

A node's GPUs come from the run spec's `gpus` (the inventory/facts: index, uuid, name); the runner
checks them against nvidia-smi before anything starts. `packing: exclusive` (the plan's default):
one server on the node at a time, on the GPUs it needs; `shared`: as many as fit on disjoint sets.
"""
from __future__ import annotations

import heapq

from .runspec import Serve

# flag -> (short form) the parallel sizes whose product is the number of GPUs one server uses
PARALLEL_FLAGS = {"--tensor-parallel-size": "-tp", "--pipeline-parallel-size": "-pp",
                  "--data-parallel-size": "-dp"}


def parallel_sizes(argv: list[str]) -> dict[str, int]:
    """{'--tensor-parallel-size': N, ...} as vLLM's argparse reads it (the last one wins); ValueError
    names the flag when its value is not a positive integer."""
    out: dict[str, int] = {}
    for i, w in enumerate(argv):
        for flag, short in PARALLEL_FLAGS.items():
            for name in (flag, short):
                if w == name:
                    val = argv[i + 1] if i + 1 < len(argv) else ""
                elif w.startswith(name + "="):
                    val = w.split("=", 1)[1]
                else:
                    continue
                if not val.isdigit() or int(val) < 1:
                    raise ValueError(f"{flag} {val!r} is not a positive integer")
                out[flag] = int(val)
    return out


def needed(argv: list[str]) -> int:
    """How many GPUs one server with this argv uses (1 when no parallel size is given)."""
    n = 1
    for v in parallel_sizes(argv).values():
        n *= v
    return n


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


def pick(free: list[int], need: int, groups: list[list[int]] | None = None) -> list[int] | None:
    """The GPU set a server needing `need` GPUs gets from `free` (indices), or None when none fits.

    Inside one group (no groups: all GPUs are one group); the lowest run of consecutive indices first
    (on HGX boards neighbours share a PCIe switch), else the lowest free ones of the group that fits
    tightest (the big free groups stay for the wide servers)."""
    if need == 1 and not groups:   # the common case, and the split's hot path
        return [min(free)] if free else None
    free_set = set(free)
    cands = []
    for g in groups or [sorted(free_set)]:
        avail = [i for i in g if i in free_set]
        if len(avail) < need:
            continue
        for j in range(len(avail) - need + 1):
            run = avail[j:j + need]
            if run[-1] - run[0] == need - 1:
                cands.append((0, len(avail), run))
                break
        else:
            cands.append((1, len(avail), avail[:need]))
    return min(cands)[2] if cands else None


def fits_ever(need: int, gpus: list[int], groups: list[list[int]] | None) -> bool:
    return pick(gpus, need, groups) is not None


def admit(need: int, pin: int | None, free, groups, picker=pick) -> list[int] | None:
    """The admission rule, for the pool (runner.Runner.place) and the split's simulation (simulate) alike: in
    queue order, an item starts on its pinned GPU when that is free, else on the set `picker` (pick)
    gives it from the free GPUs; None: it waits. (Exclusive packing: nothing starts beside a running one.)"""
    if pin is not None:
        return [pin] if pin in free else None
    return picker(free, need, groups) if need <= len(free) else None


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


# ------------------------------------------------------------------------------------------ runner side
def check_gpus(want: list[dict], seen: list[dict]) -> list[dict]:
    """The spec's GPUs completed from nvidia-smi's (index, uuid, name); ValueError when they disagree
    (an inventory written for another node, a GPU that fell off the bus)."""
    by_index = {g["index"]: g for g in seen}
    out = []
    for g in want:
        s = by_index.get(g["index"])
        if s is None:
            raise ValueError(f"GPU {g['index']} is not listed by nvidia-smi (it lists {sorted(by_index)})")
        if g.get("uuid") and g["uuid"] != s["uuid"]:
            raise ValueError(f"GPU {g['index']}: nvidia-smi says UUID {s['uuid']}, the inventory {g['uuid']}")
        out.append({"index": g["index"], "uuid": s["uuid"], "name": s.get("name") or g.get("name") or "?"})
    return out
