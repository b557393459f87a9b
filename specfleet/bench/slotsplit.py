"""The split over GPU slots: nodes with several GPUs, configurations that need several GPUs or a GPU model.

split.split() hands over here when a node lists more than one GPU under `packing: shared`, or when a
configuration says where it may run (tensor/pipeline parallel size, gpu_model, whole_node). A node's
busy time is what the runner's pool does with its queue (slots.simulate: in queue order, every item
that fits on free GPUs starts; exclusive = one at a time). The baseline runs on every node first.

Search: greedy by GPU-seconds (widest, longest first) onto the node whose simulated end grows least,
then moves and swaps while the makespan (then the sum of squares) falls. Lower bound: max(the longest
baseline, every other item at its best, total GPU-seconds / all GPUs; exclusive: total seconds / nodes).
"""
from __future__ import annotations

import itertools

from .plan import Plan, PlanError, gpus_needed
from .slots import fits_ever, simulate


def node_gpus(node) -> list[int]:
    return [g["index"] for g in node.gpus] or [0]


def needs_slots(plan: Plan, nodes) -> bool:
    """True when the one-GPU split (split.py's exact search) cannot say what runs where."""
    many = any(len(n.gpus) > 1 for n in nodes)
    placed = any(c.gpu_model or c.whole_node or gpus_needed(plan, c.name) > 1 for c in plan.configurations)
    return placed or (many and plan.packing == "shared")


def need_on(plan: Plan, config: str, node) -> int:
    c = plan.config(config)
    return len(node_gpus(node)) if c.whole_node else gpus_needed(plan, config)


def why_not(plan: Plan, config: str, node) -> str | None:
    """Why `config` cannot run on `node`, or None."""
    c, gpus = plan.config(config), node_gpus(node)
    need = gpus_needed(plan, config)
    if not fits_ever(need, gpus, node.gpu_groups):
        return (f"needs {need} GPUs in one group, {node.name} has {len(gpus)}"
                + (f" in NVLink groups {list(node.gpu_groups)}" if node.gpu_groups else ""))
    if c.gpu_model:
        names = {g.get("name") for g in node.gpus}
        if not names or None in names:
            return f"gpu_model {c.gpu_model!r}: {node.name}'s GPU names are unknown (inventory gpus without name)"
        if not all(c.gpu_model.lower() in n.lower() for n in names):
            return f"gpu_model {c.gpu_model!r}: {node.name} has {', '.join(sorted(names))}"
    return None


def slot_split(plan: Plan, nodes, pins: dict[str, str], item_s, durations=None):
    from .split import Split
    names = [n.name for n in nodes]
    by = {n.name: n for n in nodes}
    base = plan.baseline
    others = [c.name for c in plan.configurations if c.name != base]
    for n in nodes:
        why = why_not(plan, base, n)
        if why:
            raise PlanError(f"{plan.file}: baseline {base!r} runs on every node, but {why}")
    allowed = {c: [n for n in names if why_not(plan, c, by[n]) is None] for c in others}
    for c in others:
        if not allowed[c]:
            raise PlanError(f"{plan.file}: configuration {c!r} fits no selected node: "
                            + "; ".join(why_not(plan, c, by[n]) for n in names))
        if c in pins and pins[c] not in allowed[c]:
            raise PlanError(f"--assign {c}={pins[c]}: {why_not(plan, c, by[pins[c]])}")
    dur = {c: {n: item_s(plan, c, by[n], durations) for n in names} for c in [base, *others]}
    need = {c: {n: need_on(plan, c, by[n]) for n in names} for c in [base, *others]}
    packing = plan.packing

    def queue(n: str, assign: dict[str, str]) -> list[str]:
        mine = sorted((c for c in others if assign.get(c) == n), key=lambda c: (-need[c][n], -dur[c][n], c))
        return [base, *mine]

    def node_time(n: str, assign: dict[str, str]) -> float:
        items = [(c, need[c][n], dur[c][n]) for c in queue(n, assign)]
        return simulate(items, node_gpus(by[n]), by[n].gpu_groups, packing)[0]

    def score(assign):
        t = [node_time(n, assign) for n in names]
        return max(t), sum(x * x for x in t)

    # greedy: GPU-seconds first, onto the node whose end grows least
    assign: dict[str, str] = {c: pins[c] for c in others if c in pins}
    free = sorted((c for c in others if c not in pins),
                  key=lambda c: -min(dur[c][n] * need[c][n] for n in allowed[c]))
    for c in free:
        best = None
        for n in allowed[c]:
            key = (node_time(n, {**assign, c: n}), node_time(n, assign), n)
            if best is None or key < best[0]:
                best = (key, n)
        assign[c] = best[1]
    cur = score(assign)
    improved = True
    while improved:
        improved = False
        for c in free:
            for n in allowed[c]:
                if assign[c] != n:
                    trial = {**assign, c: n}
                    s = score(trial)
                    if s < cur:
                        assign, cur, improved = trial, s, True
        for a, b in itertools.combinations(free, 2):
            if assign[a] != assign[b] and assign[b] in allowed[a] and assign[a] in allowed[b]:
                trial = {**assign, a: assign[b], b: assign[a]}
                s = score(trial)
                if s < cur:
                    assign, cur, improved = trial, s, True
    load = {n: node_time(n, assign) for n in names}
    return Split(queues={n: queue(n, assign) for n in names}, node_s=load, makespan_s=max(load.values()),
                 lower_bound_s=lower_bound(plan, names, by, dur, need, allowed, packing), method="slots",
                 durations=dur)


def lower_bound(plan, names, by, dur, need, allowed, packing) -> float:
    base = plan.baseline
    others = [c for c in dur if c != base]
    lb = max(max(dur[base][n] for n in names), max((min(dur[c][n] for n in allowed[c]) for c in others), default=0))
    if packing == "exclusive":
        cap = len(names)
        work = sum(dur[base][n] for n in names) + sum(min(dur[c][n] for n in allowed[c]) for c in others)
    else:
        cap = sum(len(node_gpus(by[n])) for n in names)
        work = sum(dur[base][n] * need[base][n] for n in names) + \
            sum(min(dur[c][n] * need[c][n] for n in allowed[c]) for c in others)
    return max(lb, work / cap)
