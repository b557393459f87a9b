"""GPU slots: which GPUs of a node a server gets, several servers at once.

Stdlib only: part of the worker program; the bastion's split imports the same admission rule
(`admit`), so it has one definition. How many GPUs a server needs is its typed parallel sizes
(runspec.Serve.gpus_needed; the plan's plan.gpus_needed). The node's GPUs, `packing` and
`gpu_groups`: docs/campaign.md §12.
"""
from __future__ import annotations

from .runspec import Gpu


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
    """The admission rule, for the pool (runner.Runner.place) and the split's simulation (gpusets.simulate) alike: in
    queue order, an item starts on its pinned GPU when that is free, else on the set `picker` (pick)
    gives it from the free GPUs; None: it waits. (Exclusive packing: nothing starts beside a running one.)"""
    if pin is not None:
        return [pin] if pin in free else None
    return picker(free, need, groups) if need <= len(free) else None


# ------------------------------------------------------------------------------------------ runner side
def check_gpus(want: list[Gpu], seen: list[dict]) -> list[Gpu]:
    """The spec's GPUs completed from nvidia-smi's rows (index, uuid, name); ValueError when they
    disagree (an inventory written for another node, a GPU that fell off the bus)."""
    by_index = {g["index"]: g for g in seen}
    out = []
    for g in want:
        s = by_index.get(g.index)
        if s is None:
            raise ValueError(f"GPU {g.index} is not listed by nvidia-smi (it lists {sorted(by_index)})")
        if g.uuid and g.uuid != s["uuid"]:
            raise ValueError(f"GPU {g.index}: nvidia-smi says UUID {s['uuid']}, the inventory {g.uuid}")
        out.append(Gpu(g.index, s["uuid"], s.get("name") or g.name or "?"))
    return out
