"""The split over GPU slots: nodes with several GPUs, configurations that need several GPUs or a GPU model.

The one split (split.split calls it for every fleet): a one-GPU node is a node of one slot. A node's
busy time is what the runner's pool does with its queue (gpusets.NodeSim.run, through the worker's
slots.admit: in queue order, every item that fits on free GPUs starts; exclusive = one at a time). The
baseline runs on every node first. Where every node is one machine (one GPU, or exclusive packing), the
bound adds bounds.machine_bound.
The search (class Search: three starts, moves, swaps, exchanges, polished queue orders, an iterated
local search) and the lower bound are described in docs/campaign.md "Nodes with several GPUs"; it
stops after MAX_SIMULATIONS simulated node ends, so the split is deterministic and its time bounded.
"""
from __future__ import annotations

import bisect
import dataclasses
import random
from dataclasses import dataclass, field

from ...plan import Plan, PlanError, copy_of, gpu_copy, gpus_needed
from .bounds import count_bound, machine_bound, pigeonhole
from .gpusets import NodeSim, simulate
from ...worker.slots import fits_ever

MAX_ROUNDS = 500     # improving steps of one local search (each lowers the makespan or the spread)
# node ends simulated per split, at most: fab bench waits on the split (~20-60 µs each on one core,
# by the node's size); the split is then the best found -- deterministic, not timed
MAX_SIMULATIONS = 60_000
POLISH_SHUFFLES = 60    # random queue orders tried per polish of one node
POLISH_SWAPS = 600      # pairwise order swaps tried after those
PERTURB_ROUNDS = 6   # shakes of the iterated local search
# ... where every node is one machine (one GPU, or exclusive): a node's end is a sum, no simulation
# is spent on queue orders, so the budget allows many more shakes (the exact one-GPU search they
# replace reached the optimum on campaign_makespan's one-GPU fleets; these keep within 2 % of it)
MACHINE_PERTURB_ROUNDS = 60
# of a set of twin nodes (the same GPUs, groups, durations), the least loaded tried for an item by the greedy,
# moves, swaps and polish: the other twins can only end the item as late (the search scales with sets, not nodes)
TWINS_TRIED = 4
# a packed order (Search.packed) costs about as much CPU as this many node simulations: the budget
# counts it so, and MAX_SIMULATIONS keeps bounding the split's time
PACKED_COST = 4
EXCHANGE_PAIRS = 6   # pairs tried per item by a one-for-two exchange (the nearest in GPU-seconds)
SETTLE_ROUNDS = 6    # polish-then-improve rounds of one settle, at most
# queue orders a node's end is simulated under (the best is the queue): widest first, longest first,
# most GPU-seconds first; ties by name so the same plan gives the same queue
ORDERS = (lambda need, d, c: (-need, -d, c), lambda need, d, c: (-d, -need, c), lambda need, d, c: (-need * d, c))


def durations_by_twin(plan: Plan, configs: list[str], nodes: list, item_s, durations):
    """(config -> node -> item_s, the twin sets): item_s is computed once per set of twin nodes
    (nodes that differ only in name and have no measured time of their own get the same estimate),
    so 256 identical Slurm nodes cost one estimate per configuration."""
    twins: dict[str, list] = {}
    for n in nodes:   # a node's own measured times (measured.py) make it unlike its twins
        own = [(c, d["item_s"].get(n.name)) for c, d in (durations or {}).items() if d.get("item_s")]
        twins.setdefault(repr((dataclasses.replace(n, name=""), own)), []).append(n)
    dur: dict[str, dict[str, float]] = {c: {} for c in configs}
    for members in twins.values():
        for c in configs:
            dur[c].update(dict.fromkeys((n.name for n in members), item_s(plan, c, members[0], durations)))
    return dur, [[n.name for n in members] for members in twins.values()]


def node_gpus(node) -> list[int]:
    return [g["index"] for g in node.gpus] or [0]


def head(plan: Plan, gpus: list[int]) -> list[str]:
    """What the queue of a node with GPUs `gpus` (indices) starts with: the baseline, and with
    equivalence.every_gpu on a node of several GPUs, the baseline's run on each other GPU (pins_of)."""
    if not (plan.equivalence.every_gpu and len(gpus) > 1):
        return [plan.baseline]
    return [plan.baseline, *(gpu_copy(plan.baseline, i) for i in gpus[1:])]


def pins_of(plan: Plan, gpus: list[int]) -> dict[str, int]:
    """item -> the GPU index it must run on (equivalence.every_gpu: the baseline on the node's first GPU,
    each copy on its own); {} otherwise. The runner reads it as item["gpu_pin"] (spec.build_run_spec)."""
    h = head(plan, gpus)
    return {h[0]: gpus[0], **{c: copy_of(c, plan.baseline) for c in h[1:]}} if len(h) > 1 else {}


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


@dataclass
class Split:
    queues: dict[str, list[str]]           # node -> ordered config names, baseline first
    node_s: dict[str, float]               # node -> estimated busy time
    makespan_s: float
    lower_bound_s: float
    method: str                            # 'exact' (it reaches the lower bound) or 'heuristic'
    durations: dict[str, dict[str, float]] = field(default_factory=dict)  # config -> node -> s
    source: str = ""                       # where the durations came from (split.split, measured.py)

    @property
    def ratio(self) -> float:
        return self.makespan_s / self.lower_bound_s if self.lower_bound_s else 1.0


def slot_split(plan: Plan, nodes, pins: dict[str, str], item_s, durations=None):
    names = [n.name for n in nodes]
    by = {n.name: n for n in nodes}
    base = plan.baseline
    others = [c.name for c in plan.configurations if c.name != base]
    for n in nodes:
        why = why_not(plan, base, n)
        if why:
            raise PlanError(f"{plan.file}: baseline {base!r} runs on every node, but {why}")
    dur, twins = durations_by_twin(plan, [base, *others], nodes, item_s, durations)
    fits = {c: [] for c in others}   # twins fit the same configurations (why_not names the node: asked again below)
    need = {c: {} for c in [base, *others]}
    for members in twins:
        for c in need:
            need[c].update(dict.fromkeys(members, need_on(plan, c, by[members[0]])))
        for c in others:
            if why_not(plan, c, by[members[0]]) is None:
                fits[c].extend(members)
    allowed = {c: [n for n in names if n in ok] for c, ok in ((c, set(fits[c])) for c in others)}
    firsts = {m[0] for m in twins}   # a twin stands for its set where only durations matter (bounds, sizes)
    reps = {c: [n for n in allowed[c] if n in firsts] for c in others}
    for c in others:
        if not allowed[c]:
            raise PlanError(f"{plan.file}: configuration {c!r} fits no selected node: "
                            + "; ".join(why_not(plan, c, by[n]) for n in names))
        if c in pins and pins[c] not in allowed[c]:
            raise PlanError(f"--assign {c}={pins[c]}: {why_not(plan, c, by[pins[c]])}")
    heads = {n: head(plan, node_gpus(by[n])) for n in names}
    for n in names:
        for c in heads[n][1:]:   # the baseline's runs on the node's other GPUs: the baseline's time
            dur.setdefault(c, {})[n], need.setdefault(c, {})[n] = dur[base][n], 1
    gpu_pins = {n: pins_of(plan, node_gpus(by[n])) for n in names}
    search = Search(names, by, heads, others, allowed, pins, dur, need, plan.packing, gpu_pins, twins)
    lb = lower_bound(names, by, heads, dur, need, reps, others, plan.packing)
    if all(search.single.values()):   # every node one machine: its busy time is the sum of its items
        lb = max(lb, machine_bound(others, names, twins, dur, {n: sum(dur[c][n] for c in heads[n]) for n in names},
                                   pins, allowed))
    on = search.run(lb)
    load = {n: search.node_time(n, on[n]) for n in names}
    return Split(queues={n: search.queue(n, on[n]) for n in names}, node_s=load, makespan_s=max(load.values()),
                 lower_bound_s=lb, method="exact" if max(load.values()) <= lb + 1e-9 else "heuristic",
                 durations=dur)


class Search:
    """Which configurations go to which node, and in which queue order (docs/campaign.md "Nodes with
    several GPUs"). A node's polished order is carried into its later sets of items (orders())."""

    def __init__(self, names, by, heads, others, allowed, pins, dur, need, packing, gpu_pins, twins):
        self.names, self.by, self.heads, self.others = names, by, heads, others
        self.twins = twins        # lists of nodes that differ only in name (durations_by_twin)
        self.pos = {n: i for i, n in enumerate(names)}
        self.lb = 0.0             # run(lb): a split that reaches it is not searched further
        self.gpu_pins = gpu_pins  # node -> {item: GPU index}
        self.allowed, self.pins, self.dur, self.need, self.packing = allowed, pins, dur, need, packing
        self.n_gpus = {n: len(node_gpus(by[n])) for n in names}
        # one machine: a one-GPU node, or exclusive packing; its end is the sum of its items in any order
        self.single = {n: packing == "exclusive" or self.n_gpus[n] == 1 for n in names}
        self.memo: dict[tuple[str, frozenset], tuple[float, list[str]]] = {}
        self.hint: dict[str, list[str]] = {}   # node -> its last polished order
        self.simulations = 0
        self.use_packed = False
        self.heads_done: dict[str, dict[int, float]] = {}
        self.limit = MAX_SIMULATIONS   # run(): each start searches until its share of the budget
        sims: dict[tuple, NodeSim] = {}   # one per GPU layout: twins share the admission table
        self.sim, self.rows = {}, {}      # node -> its NodeSim; node -> {item: NodeSim row}
        self.keys = {}   # node -> per queue order of ORDERS, item -> its sort key (orders() sorts thousands of sets)
        for members in twins:   # twins have the same rows and keys: built once per set, shared
            n = members[0]
            gpus, groups = node_gpus(by[n]), by[n].gpu_groups
            sim = sims.setdefault((tuple(gpus), repr(groups)), NodeSim(gpus, groups, packing))
            pin = gpu_pins[n]
            rows = {c: sim.row(need[c][n], dur[c][n], pin.get(c)) for c in dur if n in dur[c]}
            keys = [{c: key(need[c][n], dur[c][n], c) for c in others} for key in ORDERS]
            for m in members:
                self.sim[m], self.rows[m], self.keys[m] = sim, rows, keys

    # ---------------------------------------------------------------- one node
    @property
    def spent(self) -> bool:
        return self.simulations >= self.limit

    def end(self, n: str, q: list[str]) -> float:
        self.simulations += 1
        rows = self.rows[n]
        return self.sim[n].run([rows[c] for c in q])

    def orders(self, n: str, mine: frozenset):
        keys = self.keys[n]
        for key in keys[:1] if self.single[n] else keys:
            yield [*self.heads[n], *sorted(mine, key=key.__getitem__)]
        if n in self.hint and not self.single[n]:
            kept = [c for c in self.hint[n] if c in mine]
            new = sorted(mine - set(kept), key=keys[2].__getitem__)
            yield [*self.heads[n], *new, *kept]
            yield [*self.heads[n], *kept, *new]

    def best(self, n: str, mine) -> tuple[float, list[str]]:
        mine = frozenset(mine)
        if (n, mine) not in self.memo:
            got = None
            for q in self.orders(n, mine):
                t = self.end(n, q)
                if got is None or t < got[0] - 1e-9:
                    got = (t, q)
            # the packed order, in the third start's search (run()), where the size orders leave
            # the node ending past both the fleet's bound and its own floor
            if self.use_packed and got[0] > max(self.lb, self.floor(n, mine)):
                q = self.packed(n, mine)
                self.simulations += PACKED_COST
                if q is not None:
                    t = self.end(n, q)
                    if t < got[0] - 1e-9:
                        got = (t, q)
            self.memo[(n, mine)] = got
        return self.memo[(n, mine)]

    def node_time(self, n: str, mine) -> float:
        return self.best(n, mine)[0]

    def queue(self, n: str, mine) -> list[str]:
        return self.best(n, mine)[1]

    def floor(self, n: str, mine) -> float:
        """A cheap lower bound on node_time(n, mine): its longest item, its GPU-seconds over its GPUs."""
        items = [*self.heads[n], *mine]
        if self.packing == "exclusive":
            return sum(self.dur[c][n] for c in items)
        return max(max(self.dur[c][n] for c in items),
                   sum(self.dur[c][n] * self.need[c][n] for c in items) / self.n_gpus[n])

    def polish(self, n: str, mine) -> None:
        if self.single[n]:   # every order ends alike
            return
        key = (n, frozenset(mine))
        t, q = self.best(n, mine)
        self.memo[key] = polish(t, q, lambda q: self.end(n, q), lambda: self.spent, len(self.heads[n]))
        self.hint[n] = self.memo[key][1]

    # ---------------------------------------------------------------- the fleet
    def span(self, on: dict) -> float:
        return max(self.node_time(n, on[n]) for n in self.names)

    def score(self, times: dict) -> tuple[float, float]:
        return max(times.values()), sum(x * x for x in times.values())

    def greedy(self) -> dict:
        """GPU-seconds first, onto the node whose end grows least."""
        names, allowed, dur, need = self.names, self.allowed, self.dur, self.need
        on = {n: frozenset() for n in names}
        for c, n in self.pins.items():
            on[n] = on[n] | {c}
        firsts = {m[0] for m in self.twins}
        free = sorted((c for c in self.others if c not in self.pins),
                      key=lambda c: -min(dur[c][n] * need[c][n] for n in allowed[c] if n in firsts))
        rows = [sorted(self.rank(n, on[n]) for n in members) for members in self.twins]
        twin_of = {n: k for k, members in enumerate(self.twins) for n in members}
        ok = {c: set(allowed[c]) for c in free}
        for c in free:
            tried = [row[i][-1] for row in rows for i in range(min(TWINS_TRIED, len(row))) if row[i][-1] in ok[c]]
            n = min(tried, key=lambda n: (self.node_time(n, on[n] | {c}), self.node_time(n, on[n]), n))
            row = rows[twin_of[n]]
            row.remove(self.rank(n, on[n]))
            on[n] = on[n] | {c}
            bisect.insort(row, self.rank(n, on[n]))
        return on

    def rank(self, n: str, mine) -> tuple:
        """Which of a set of twins is tried first: the one that ends first, then the one with the least
        GPU-seconds queued (the most room), then the nodes' order."""
        work = sum(self.dur[c][n] * self.need[c][n] for c in (*self.heads[n], *mine))
        return self.node_time(n, mine), work, self.pos[n], n

    def near(self, on: dict, crit: str) -> list[str]:
        """The nodes a move or swap off `crit` is tried with: of each set of twins the TWINS_TRIED first
        by rank, in the nodes' order (every node of a small fleet)."""
        tried = set()
        for members in self.twins:
            tried.update(sorted((n for n in members if n != crit), key=lambda n: self.rank(n, on[n]))[:TWINS_TRIED])
        return [n for n in self.names if n in tried]

    def improve(self, on: dict) -> dict:
        """Moves, swaps, then one-for-two exchanges off the critical node: the first that lowers
        (makespan, sum of squares).
        A trial whose receiving node cannot end before the makespan (its floor, then its simulated end)
        is dropped before the critical node is simulated; none is tried once the budget is spent."""
        on, names, allowed, pins = dict(on), self.names, self.allowed, self.pins
        for _ in range(MAX_ROUNDS):
            times = {n: self.node_time(n, on[n]) for n in names}
            cur, crit = self.score(times), max(names, key=lambda n: times[n])
            if cur[0] <= self.lb + 1e-9:   # no split ends sooner
                return on
            near = self.near(on, crit)

            def better(a_side, b: str, b_side) -> bool:
                if self.floor(b, b_side) > cur[0] or self.spent:
                    return False
                tb = self.node_time(b, b_side)
                return tb <= cur[0] and self.score({**times, crit: self.node_time(crit, a_side), b: tb}) < cur

            found = None
            for c in sorted(on[crit] - set(pins)):
                for n in (x for x in near if x in allowed[c]):
                    if better(on[crit] - {c}, n, on[n] | {c}):
                        found = {crit: on[crit] - {c}, n: on[n] | {c}}
                        break
                for n in (x for x in near if not found):
                    for b in sorted(on[n] - set(pins)):
                        if crit not in allowed[b] or n not in allowed[c]:
                            continue
                        a_side, b_side = on[crit] - {c} | {b}, on[n] - {b} | {c}
                        if better(a_side, n, b_side):
                            found = {crit: a_side, n: b_side}
                            break
                if found:
                    break
            if not found:
                found = self.exchange(on, crit, near, better)
            if not found:
                return on
            on.update(found)
        return on

    def exchange(self, on: dict, crit: str, near: list[str], better) -> dict | None:
        """One item against two of another node whose GPU counts add up to its own (a TP=2 server
        against two one-GPU ones: no move or swap of one item repairs a node whose wide server runs
        last on idle GPUs), both ways between the critical node and each near node; per item the
        EXCHANGE_PAIRS pairs nearest to it in GPU-seconds. The first that better() accepts."""
        pins, allowed, need = set(self.pins), self.allowed, self.need

        def gs(c: str, n: str) -> float:
            return self.dur[c][n] * need[c][n]

        for n in near:
            for src, dst in ((crit, n), (n, crit)):   # one item src -> dst, two dst -> src
                twos = sorted(on[dst] - pins)
                for c in sorted(on[src] - pins):
                    if dst not in allowed[c]:
                        continue
                    pairs = sorted((abs(gs(c, src) - gs(b1, dst) - gs(b2, dst)), b1, b2)
                                   for i, b1 in enumerate(twos) for b2 in twos[i + 1:]
                                   if need[b1][dst] + need[b2][dst] == need[c][src]
                                   and src in allowed[b1] and src in allowed[b2])
                    for _, b1, b2 in pairs[:EXCHANGE_PAIRS]:
                        at_src, at_dst = on[src] - {c} | {b1, b2}, on[dst] - {b1, b2} | {c}
                        a_side, b_side = (at_src, at_dst) if src == crit else (at_dst, at_src)
                        if better(a_side, n, b_side):
                            return {crit: a_side, n: b_side}
        return None

    def settle(self, on: dict) -> dict:
        """improve, then polish every node's order and improve again while that lowers the makespan."""
        on = self.improve(on)
        for _ in range(SETTLE_ROUNDS):
            before = self.span(on)
            if self.spent or before <= self.lb + 1e-9:
                break
            times = {n: self.node_time(n, on[n]) for n in self.names}
            crit = max(self.names, key=lambda n: times[n])
            near = {crit, *self.near(on, crit)}
            for n in (x for x in self.names if x in near):
                self.polish(n, on[n])
            on = self.improve(on)
            if self.span(on) >= before - 1e-9:
                break
        return on

    def gpu_start(self) -> dict:
        """The second start: a list schedule at the GPU level. Every item, the widest first, then by
        GPU-seconds, goes to the GPUs (one node's, inside one group) where it ends first, given what
        each GPU already holds; each node's queue is then its items in order of planned start (its
        hint, and that order's end is kept for the set)."""
        names, allowed, dur, need = self.names, self.allowed, self.dur, self.need
        free = {n: dict(self.head_free(n)) for n in names}   # node -> {GPU: when it comes free}
        plan = {n: [] for n in names}                   # node -> [(start, -need, item)]
        firsts = {m[0] for m in self.twins}
        items = sorted(self.others, key=lambda c: (-max(need[c][n] for n in allowed[c]),
                                                   -min(dur[c][n] * need[c][n] for n in allowed[c] if n in firsts), c))
        for c in items:
            where = [self.pins[c]] if c in self.pins else allowed[c]
            best = None
            for n in where:
                start, got = self.earliest(n, need[c][n], free[n])
                if got is not None and (best is None or start + dur[c][n] < best[0] - 1e-9):
                    best = (start + dur[c][n], start, n, got)
            end, start, n, got = best
            for g in got:
                free[n][g] = end
            plan[n].append((start, -need[c][n], c))
        on = {}
        for n in names:
            on[n] = frozenset(c for _, _, c in plan[n])
            q = [*self.heads[n], *(c for _, _, c in sorted(plan[n]))]
            self.hint[n] = q
            t = self.end(n, q)
            key = (n, on[n])
            if key not in self.memo or t < self.memo[key][0] - 1e-9:
                self.memo[key] = (t, q)
        return on

    def head_free(self, n: str) -> dict[int, float]:
        """GPU -> when the node's head items (the baseline, its copies) leave it, as the runner runs them."""
        if n not in self.heads_done:
            dur, need = self.dur, self.need
            items = [(c, need[c][n], dur[c][n], self.gpu_pins[n].get(c)) for c in self.heads[n]]
            free = dict.fromkeys(node_gpus(self.by[n]), 0.0)
            for c, (start, got) in simulate(items, node_gpus(self.by[n]), self.by[n].gpu_groups, self.packing,
                                           checked=True)[1].items():
                for g in got:
                    free[g] = max(free[g], start + dur[c][n])
            self.heads_done[n] = free
        return self.heads_done[n]

    def earliest(self, n: str, k: int, free: dict[int, float]) -> tuple[float | None, list[int] | None]:
        """(start, GPUs) of the k GPUs of one group of node n that are free together first, by `free`."""
        if self.packing == "exclusive":
            return max(free.values()), list(free)
        start, got = None, None
        for g in self.by[n].gpu_groups or [list(free)]:
            if len(g) >= k:
                early = sorted(g, key=lambda i: (free[i], i))[:k]
                s0 = max(free[i] for i in early)
                if start is None or s0 < start:
                    start, got = s0, early
        return start, got

    def packed(self, n: str, mine) -> list[str] | None:
        """A queue order for node n from a packing of its items onto its GPUs: the wide items first,
        each where it starts first; the one-GPU items longest first onto the GPU that frees first, then
        moved and swapped between the busiest GPU and the others while that lowers the busiest GPU's
        end; the queue is the plan's order of start. What the size orders miss: with three to five
        items per GPU, longest-first leaves uneven tails."""
        if self.packing == "exclusive":
            return None
        dur, need, keys = self.dur, self.need, self.keys[n]
        free = dict(self.head_free(n))
        plan, wide, singles = [], [], []
        for c in mine:
            (wide if need[c][n] > 1 else singles).append(c)
        for c in sorted(wide, key=keys[0].__getitem__):
            start, got = self.earliest(n, need[c][n], free)
            for g in got:
                free[g] = start + dur[c][n]
            plan.append((start, c))
        gids = list(free)
        load = [free[g] for g in gids]
        on = [[] for _ in gids]
        ds = {c: dur[c][n] for c in singles}
        for c in sorted(singles, key=keys[1].__getitem__):
            k = load.index(min(load))
            on[k].append(c)
            load[k] += ds[c]
        for _ in range(4 * len(singles)):
            top = load.index(max(load))
            step = None
            for g in range(len(gids)):
                room = load[top] - load[g] - 1e-9   # what may move from top to g: the two then both end sooner
                if g == top or room <= 0:
                    continue
                for c in on[top]:
                    dc = ds[c]
                    if dc < room:
                        step = (g, c, None, dc)
                        break
                    for x in on[g]:
                        if 1e-9 < dc - ds[x] < room:
                            step = (g, c, x, dc - ds[x])
                            break
                    if step:
                        break
                if step:
                    break
            if step is None:
                break
            g, c, x, delta = step
            on[top].remove(c)
            on[g].append(c)
            if x is not None:
                on[g].remove(x)
                on[top].append(x)
            load[top] -= delta
            load[g] += delta
        for k, items in enumerate(on):
            t = free[gids[k]]
            for c in sorted(items, key=keys[1].__getitem__):
                plan.append((t, c))
                t += ds[c]
        return [*self.heads[n], *(c for _, c in sorted(plan, key=lambda x: (x[0], keys[0][x[1]])))]

    def run(self, lb: float) -> dict:
        """From each of three starts (greedy, gpu_start, greedy judging nodes by their packed order too),
        a third of the budget each: settle, then shaken(); the best split found. They explore
        differently: on campaign_makespan's multi-GPU trials each alone misses some that another meets
        (benchmarks/README.md)."""
        self.lb = lb
        best = None
        starts = ((self.greedy, False), (self.gpu_start, False), (self.greedy, True))   # (start, use_packed)
        for k, (start, self.use_packed) in enumerate(starts):
            self.limit = MAX_SIMULATIONS * (k + 1) // len(starts)
            if best is not None and (self.span(best) <= lb * 1.0001 or self.spent):
                break
            got = self.shaken(self.settle(start()))
            if best is None or self.span(got) < self.span(best) - 1e-9:
                best = got
        return best

    def shaken(self, start: dict) -> dict:
        """The iterated local search from a settled split: PERTURB_ROUNDS shakes, the best kept."""
        best = cur = start
        rng = random.Random(0)  # deterministic: the same plan always gives the same split
        movable = [c for c in self.others if c not in self.pins and len(self.allowed[c]) > 1]
        rounds = MACHINE_PERTURB_ROUNDS if all(self.single.values()) else PERTURB_ROUNDS
        for _ in range(rounds if movable and len(self.names) > 1 else 0):
            if self.span(best) <= self.lb * 1.0001 or self.spent:
                break
            trial = dict(cur)
            crit = max(self.names, key=lambda n: self.node_time(n, trial[n]))
            pool = sorted(c for c in trial[crit] if c in movable) or movable
            for c in rng.sample(pool, min(len(pool), rng.randint(1, 2))):
                src = next(n for n in self.names if c in trial[n])
                dst = rng.choice([n for n in self.allowed[c] if n != src])
                trial[src], trial[dst] = trial[src] - {c}, trial[dst] | {c}
            trial = self.settle(trial)
            if self.span(trial) < self.span(best) - 1e-9:
                best = trial
            cur = trial if self.span(trial) <= self.span(cur) * 1.02 else best
        return best


def polish(t: float, queue: list[str], end, spent=lambda: False, fixed: int = 1) -> tuple[float, list[str]]:
    """A better queue order for one node: POLISH_SHUFFLES seeded shuffles, then first-improvement
    pairwise swaps (at most POLISH_SWAPS tried); the first `fixed` items (the baseline's) stay first.
    end(queue) -> busy time; spent() -> True: stop."""
    rng, first, best = random.Random(1), queue[:fixed], (t, list(queue))
    for _ in range(POLISH_SHUFFLES):
        if spent():
            break
        rest = queue[fixed:]
        rng.shuffle(rest)
        v = end(first + rest)
        if v < best[0] - 1e-9:
            best = (v, first + rest)
    tried, improved = 0, True
    while improved and tried < POLISH_SWAPS and not spent():
        improved = False
        q = best[1]
        for i in range(fixed, len(q)):
            for j in range(i + 1, len(q)):
                trial = q[:i] + [q[j]] + q[i + 1:j] + [q[i]] + q[j + 1:]
                tried += 1
                v = end(trial)
                if v < best[0] - 1e-9:
                    best, improved = (v, trial), True
                    break
                if tried >= POLISH_SWAPS or spent():
                    break
            if improved or tried >= POLISH_SWAPS or spent():
                break
    return best


def lower_bound(names, by, heads, dur, need, allowed, others, packing) -> float:
    """max(longest item, work / capacity, pigeonhole, count_bound): every node's head items (the baseline and its GPU
    copies) are counted on that node, every other item at its best node (of `allowed[c]`: one of each
    set of twins will do)."""
    fixed = [(c, n) for n in names for c in heads[n]]
    best = {c: min(dur[c][n] for n in allowed[c]) for c in others}
    lb = max(max(dur[c][n] for c, n in fixed), max(best.values(), default=0))
    # pigeonhole and count over GPUs (shared) or nodes (exclusive), of one-GPU shares: a server on n
    # GPUs counts once per GPU (its shares sit on distinct GPUs)
    if packing == "exclusive":
        cap = len(names)
        work = sum(dur[c][n] for c, n in fixed) + sum(best.values())
        shares = [dur[c][n] for c, n in fixed] + list(best.values())
    else:
        cap = sum(len(node_gpus(by[n])) for n in names)
        work = sum(dur[c][n] * need[c][n] for c, n in fixed) + \
            sum(min(dur[c][n] * need[c][n] for n in allowed[c]) for c in others)
        shares = [dur[c][n] for c, n in fixed for _ in range(need[c][n])] + \
            [d for c in others for d in [best[c]] * min(need[c][n] for n in allowed[c])]
    return max(lb, work / cap, pigeonhole(shares, cap), count_bound(shares, cap))
