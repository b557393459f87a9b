"""The split over GPU slots: nodes with several GPUs, configurations that need several GPUs or a GPU model.

split.split() hands over here when a node lists more than one GPU under `packing: shared`, or when a
configuration says where it may run (tensor/pipeline parallel size, gpu_model, whole_node). A node's
busy time is what the runner's pool does with its queue (slots.simulate: in queue order, every item
that fits on free GPUs starts; exclusive = one at a time). The baseline runs on every node first.

Search: greedy by GPU-seconds (widest, longest first) onto the node whose simulated end grows least,
then moves and swaps off the critical node while the makespan (then the sum of squares) falls, then
an iterated local search (shake one or two items off the critical node, improve, keep the best). Lower bound: max(the longest
baseline, every other item at its best, total GPU-seconds / all GPUs (exclusive: total seconds / nodes),
and the pigeonhole bound over GPUs).
"""
from __future__ import annotations

import random

from .plan import Plan, PlanError, gpus_needed
from .slots import fits_ever, simulate

MAX_ROUNDS = 500     # improving steps of one local search (each lowers the makespan or the spread)
PERTURB_ROUNDS = 6   # shakes of the iterated local search
# queue orders a node's end is simulated under (the best is the queue): widest first, longest first,
# most GPU-seconds first; ties by name so the same plan gives the same queue
ORDERS = (lambda need, d, c: (-need, -d, c), lambda need, d, c: (-d, -need, c), lambda need, d, c: (-need * d, c))


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
    memo: dict[tuple[str, frozenset], float] = {}

    orders = memo_order = {}

    def node_time(n: str, mine: frozenset) -> float:
        """The node's end under the best of a few queue orders (the runner follows the order given)."""
        if (n, mine) not in memo:
            best = None
            for key in ORDERS:
                q = [base, *sorted(mine, key=lambda c: key(need[c][n], dur[c][n], c))]
                t = simulate([(c, need[c][n], dur[c][n]) for c in q], node_gpus(by[n]), by[n].gpu_groups, packing)[0]
                if best is None or t < best[0] - 1e-9:
                    best = (t, q)
            memo[(n, mine)], memo_order[(n, mine)] = best
        return memo[(n, mine)]

    def queue(n: str, mine) -> list[str]:
        node_time(n, frozenset(mine))
        return orders[(n, frozenset(mine))]

    on = {n: frozenset(c for c in others if pins.get(c) == n) for n in names}
    # greedy: GPU-seconds first, onto the node whose end grows least
    free = sorted((c for c in others if c not in pins),
                  key=lambda c: -min(dur[c][n] * need[c][n] for n in allowed[c]))
    for c in free:
        n = min(allowed[c], key=lambda n: (node_time(n, on[n] | {c}), node_time(n, on[n]), n))
        on[n] = on[n] | {c}

    def score(times: dict) -> tuple[float, float]:
        return max(times.values()), sum(x * x for x in times.values())

    def improve(on: dict) -> dict:
        """Moves and swaps off the critical node: the first that lowers (makespan, sum of squares)."""
        on = dict(on)
        for _ in range(MAX_ROUNDS):
            times = {n: node_time(n, on[n]) for n in names}
            cur, crit = score(times), max(names, key=lambda n: times[n])
            found = None
            for c in sorted(on[crit] - set(pins)):
                for n in (x for x in allowed[c] if x != crit):
                    trial = {**times, crit: node_time(crit, on[crit] - {c}), n: node_time(n, on[n] | {c})}
                    if score(trial) < cur:
                        found = {crit: on[crit] - {c}, n: on[n] | {c}}
                        break
                for n in (x for x in names if x != crit and not found):
                    for b in sorted(on[n] - set(pins)):
                        if crit not in allowed[b] or n not in allowed[c]:
                            continue
                        a_side, b_side = on[crit] - {c} | {b}, on[n] - {b} | {c}
                        if score({**times, crit: node_time(crit, a_side), n: node_time(n, b_side)}) < cur:
                            found = {crit: a_side, n: b_side}
                            break
                if found:
                    break
            if not found:
                return on
            on.update(found)
        return on

    def span(on: dict) -> float:
        return max(node_time(n, on[n]) for n in names)

    # iterated local search: shake one or two items off the critical node, improve, keep the best
    lb = lower_bound(plan, names, by, dur, need, allowed, packing)
    best = cur = improve(on)
    rng = random.Random(0)  # deterministic: the same plan always gives the same split
    movable = [c for c in others if c not in pins and len(allowed[c]) > 1]
    for _ in range(PERTURB_ROUNDS if movable and len(names) > 1 else 0):
        if span(best) <= lb * 1.0001:
            break
        trial = dict(cur)
        crit = max(names, key=lambda n: node_time(n, trial[n]))
        pool = sorted(c for c in trial[crit] if c in movable) or movable
        for c in rng.sample(pool, min(len(pool), rng.randint(1, 2))):
            src = next(n for n in names if c in trial[n])
            dst = rng.choice([n for n in allowed[c] if n != src])
            trial[src], trial[dst] = trial[src] - {c}, trial[dst] | {c}
        trial = improve(trial)
        if span(trial) < span(best) - 1e-9:
            best = trial
        cur = trial if span(trial) <= span(cur) * 1.02 else best
    on = best
    load = {n: node_time(n, on[n]) for n in names}
    return Split(queues={n: queue(n, on[n]) for n in names}, node_s=load, makespan_s=max(load.values()),
                 lower_bound_s=lb, method="slots",
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
    # pigeonhole over GPUs (shared) or nodes (exclusive): of the k*cap+1 longest one-GPU shares, some
    # GPU runs k+1 (a server on n GPUs counts once per GPU: its shares sit on distinct GPUs)
    if packing == "exclusive":
        shares = [dur[base][n] for n in names] + [min(dur[c][n] for n in allowed[c]) for c in others]
    else:
        shares = [dur[base][n] for n in names for _ in range(need[base][n])] + \
            [d for c in others for d in [min(dur[c][n] for n in allowed[c])] * min(need[c][n] for n in allowed[c])]
    return max(lb, work / cap, pigeonhole(shares, cap))


def pigeonhole(shares: list[float], cap: int) -> float:
    d, best, k = sorted(shares, reverse=True), 0.0, 1
    while k * cap + 1 <= len(d):
        best = max(best, sum(d[k * cap - k:k * cap + 1]))
        k += 1
    return best
