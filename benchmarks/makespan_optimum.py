"""The optimum makespan of a one-GPU split, or a lower bound tighter than the split's own, for
campaign_makespan.py (benchmark side only: it needs scipy's HiGHS MILP, a test dependency).

Nodes fall into classes (split.node_classes: the same baseline and item times). For a makespan T,
a class's node can hold any set of items ("a column") whose times fit in T after its baseline. Is
there a split under T? A set-partitioning MILP: every item in exactly one column, at most as many
columns per class as it has nodes. Binary search on T gives the optimum to BISECT_STEPS halvings.

Where a class admits more than MAX_COLUMNS columns, or columns of more than MAX_PER_NODE items
(local-copy nodes, whose short items fit eight to a node), that class is relaxed: its items only have to fit its total capacity (nodes x (T -
baseline)), as if they could be split across its nodes. The result is then a lower bound, not the
optimum, and its slack is that class's packing (named as such by campaign_makespan.py).
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_COLUMNS = 40_000     # columns per class enumerated at most; above it the class is relaxed
MAX_PER_NODE = 5         # items per column at most; a class whose nodes hold more is relaxed (its MILP is slow)
BISECT_STEPS = 16        # halvings of [lower, upper]: 1.5e-5 of the gap between them
SOLVE_LIMIT_S = 10.0     # per feasibility MILP; a timed-out one counts as feasible (the bound stays valid)


@dataclass(frozen=True)
class Optimum:
    lower: float          # no split ends before this
    best: float | None    # a split that ends here exists (None: a class was relaxed, none was built)
    relaxed: tuple[int, ...]   # classes whose packing was relaxed (their slack is in `lower`)

    @property
    def exact(self) -> bool:
        return not self.relaxed and self.best is not None


def columns(times: list[float], cap: float, limit: int) -> list[tuple[int, ...]] | None:
    """Every non-empty set of item indices whose times sum to <= cap; None past `limit` sets or
    MAX_PER_NODE items in one."""
    order = sorted(range(len(times)), key=lambda i: times[i])
    out: list[tuple[int, ...]] = []

    def rec(start: int, room: float, chosen: list[int]) -> bool:
        for j in range(start, len(order)):
            i = order[j]
            if times[i] > room + 1e-9:
                break          # sorted: no later item fits either
            chosen.append(i)
            out.append(tuple(chosen))
            if len(out) > limit or len(chosen) > MAX_PER_NODE or not rec(j + 1, room - times[i], chosen):
                return False
            chosen.pop()
        return True

    return out if rec(0, cap, []) else None


def optimum(others: list[str], classes: list[list[str]], dur: dict, base: dict, lower: float,
            upper: float, copies: dict[str, int] | None = None) -> Optimum:
    """The smallest makespan of `others` (each on one node) after every node's baseline, searched in
    [lower, upper] (lower: a valid bound; upper: a split's makespan). copies[c] = k: item c runs on k
    distinct machines at once (a TP=k server's GPUs, when the machines are GPUs); default 1."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    heads = [m[0] for m in classes]
    times = [[dur[c][h] for c in others] for h in heads]
    cols = [columns(t, upper - base[h], MAX_COLUMNS) for t, h in zip(times, heads)]
    relaxed = tuple(k for k, c in enumerate(cols) if c is None)
    cover = [float((copies or {}).get(c, 1)) for c in others]

    def feasible(t: float):
        """None: no split under t; else the makespan of one found (inf when a class was relaxed)."""
        rows, cols_i, vals, lo, hi, spans, top = [], [], [], [], [], [], []
        n_items, var = len(others), 0
        extra = n_items          # next free row after the item rows
        for k, h in enumerate(heads):
            room = t - base[h]
            if room < -1e-9:
                return None
            if cols[k] is not None:
                count_row = extra
                extra += 1
                for col in cols[k]:
                    s = sum(times[k][i] for i in col)
                    if s > room + 1e-9:
                        continue
                    for i in col:
                        rows.append(i), cols_i.append(var), vals.append(1.0)
                    rows.append(count_row), cols_i.append(var), vals.append(1.0)
                    spans.append(base[h] + s)
                    top.append(float(len(classes[k])))   # one set on several machines of a class: copies
                    var += 1
                lo.append(0.0), hi.append(float(len(classes[k])))
            else:                # relaxed: one 0/1 per item that fits a node; their total within the class's room
                cap_row = extra
                extra += 1
                for i in range(n_items):
                    if times[k][i] <= room + 1e-9:
                        rows += [i, cap_row]
                        cols_i += [var, var]
                        vals += [1.0, times[k][i]]
                        spans.append(float("inf"))
                        top.append(cover[i])   # copies on distinct machines: the relaxation lets them share
                        var += 1
                lo.append(-np.inf), hi.append(len(classes[k]) * room)
        if var == 0:
            return None if n_items else max(base[h] for h in heads)
        a = coo_matrix((vals, (rows, cols_i)), shape=(extra, var)).tocsr()
        lo_all = np.r_[cover, lo]
        hi_all = np.r_[cover, hi]
        res = milp(np.zeros(var), constraints=LinearConstraint(a, lo_all, hi_all), integrality=np.ones(var),
                   bounds=Bounds(0, np.array(top)), options={"time_limit": SOLVE_LIMIT_S})
        if res.status == 2:      # infeasible
            return None
        if res.x is None:        # timed out undecided: count it feasible, so `lower` stays a bound
            return float("inf")
        used = [spans[j] for j in range(var) if res.x[j] > 0.5]
        return max([*used, *(base[h] for h in heads)])

    lo_t, hi_t, best = lower, upper, None
    for t in (upper * (1 - 1e-6), lower):   # the split is the optimum; the bound is
        got = feasible(t)
        if got is not None and t == lower:
            return Optimum(lower, got if got != float("inf") else None, relaxed)
        if got is None and t != lower:
            return Optimum(t, None if relaxed else upper, relaxed)
    for _ in range(BISECT_STEPS):
        mid = (lo_t + hi_t) / 2
        got = feasible(mid)
        if got is None:
            lo_t = mid
        else:
            hi_t = mid
            best = got if got != float("inf") else best
    return Optimum(lo_t, best, relaxed)


def slot_floor(plan, nodes, s, upper: float | None = None) -> Optimum:
    """A lower bound on any GPU-slot schedule of split `s` (slotsplit.py; benchmark side): the machines
    are the GPUs. Every schedule runs each item on `need` distinct GPUs of one node for its whole
    duration, after the node's head items (the baseline, and its copies under equivalence.every_gpu) on
    the GPUs the runner gives them; so each GPU's items fit under the makespan. optimum() over GPU classes
    (the node's item times, the GPU's head time), an item of need k covered by k distinct GPUs, is that
    packing's smallest makespan. What it leaves out is the bound's slack against the slot schedule: a
    TP=k item's k GPUs are one node's, inside one NVLink group, busy at the same time (the schedule waits
    for k free GPUs; the floor lets the shares run apart), and the runner's queue order. `upper`: where
    the search stops (default the split's makespan, which the floor then never exceeds)."""
    from specfleet.campaign.schedule.gpusets import simulate
    from specfleet.campaign.schedule.slotsplit import head, need_on, node_gpus, pins_of

    others = [c.name for c in plan.configurations if c.name != plan.baseline]
    dur, base, classes = {c: {} for c in others}, {}, {}
    for node in nodes:
        gpus, n = node_gpus(node), node.name
        heads, pins = head(plan, gpus), pins_of(plan, gpus)
        need = [need_on(plan, plan.baseline, node), *[1] * (len(heads) - 1)]   # copies: one GPU each
        _, starts = simulate([(c, k, s.durations[c][n], pins.get(c)) for c, k in zip(heads, need)], gpus,
                             node.gpu_groups, plan.packing)
        busy = dict.fromkeys(gpus, 0.0)
        for c in heads:
            for g in starts[c][1]:
                busy[g] = max(busy[g], starts[c][0] + s.durations[c][n])
        for g in gpus:
            gpu = f"{n}/{g}"
            base[gpu] = busy[g]
            for c in others:
                dur[c][gpu] = s.durations[c][n]
            classes.setdefault((busy[g], *(s.durations[c][n] for c in others)), []).append(gpu)
    copies = {c: min(need_on(plan, c, node) for node in nodes) for c in others}
    lower = max([s.lower_bound_s, *base.values()])
    upper = s.makespan_s if upper is None else upper
    return optimum(others, list(classes.values()), dur, base, min(lower, upper), upper, copies)
