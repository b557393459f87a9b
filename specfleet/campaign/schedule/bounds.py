"""Lower bounds on a campaign's makespan (used by split.py and slotsplit.py to judge their splits).

Arguments everywhere: `others` (config names other than the baseline), `names` (node names),
`dur[config][node]` (seconds), `base[node]` (the baseline's seconds on that node), `pins`; `classes`
(node_classes): lists of nodes that give every configuration the same duration.
"""
from __future__ import annotations


def node_classes(twins: list[list[str]], others: list[str], dur, base) -> list[list[str]]:
    """Nodes that give every configuration the same duration, in the nodes' order: twins always do."""
    by_profile: dict[tuple, list[str]] = {}
    for members in twins:
        by_profile.setdefault((base[members[0]], *(dur[c][members[0]] for c in others)), []).extend(members)
    return list(by_profile.values())


def machine_bound(others, names, twins, dur, base, pins, allowed) -> float:
    """The bound when every node is one machine (one GPU, or exclusive packing): its busy time is its
    baseline (base[node]: the head items) plus its items. Every node runs its baseline; each other item
    runs somewhere, at least at its best (of `allowed[c]`); the two-class LP relaxation, pigeonhole and
    count bounds on top."""
    classes = node_classes(twins, others, dur, base)
    best = {c: min(dur[c][n] for n in allowed[c]) for c in others}
    lb = max((sum(base.values()) + sum(best.values())) / len(names), max(base.values()),
             max((min(base[n] + dur[c][n] for n in allowed[c]) for c in others), default=0.0))
    # the two-class and pigeonhole bounds let an item run on any node: a relaxation, still a bound
    return max(lb, two_class_bound(others, classes, dur, base, pins, lb), pigeonhole_bound(others, names, dur, base),
               count_bound([*base.values(), *best.values()], len(names)),
               # every node runs its baseline before its items: after the smallest one, the items alone by count
               # (35 items of 14-20 min on 8 nodes: 3 nodes run 5, at least the 15 shortest / 3 after the baseline)
               min(base.values()) + count_bound(list(best.values()), len(names)))


def two_class_bound(others, classes, dur, base, pins, lo) -> float:
    """LP-relaxation bound when the nodes fall into two classes (e.g. local copy vs NFS).

    The simple bound lets every item run at its best duration; but only the fast nodes give
    that. Fractional assignment: fill the fast class's capacity with the items that free the
    most slow-class time per second of fast-class time; binary search the smallest feasible T.
    """
    profiles = {(base[m[0]], *(dur[c][m[0]] for c in others)): m for m in classes}
    if len(profiles) != 2 or not others:
        return lo
    (pa, na), (pb, nb) = sorted(profiles.items())
    ia = {c: i + 1 for i, c in enumerate(others)}

    def feasible(t: float) -> bool:
        cap_a, cap_b = len(na) * (t - pa[0]), len(nb) * (t - pb[0])
        if cap_a < -1e-9 or cap_b < -1e-9:
            return False
        # Counting: a node of a class holds at most as many items as its shortest ones that fit.
        n_items = len(others)
        sa, sb = sorted(pa[1:]), sorted(pb[1:])
        ka = sum(1 for i in range(n_items) if pa[0] + sum(sa[:i + 1]) <= t + 1e-9)
        kb = sum(1 for i in range(n_items) if pb[0] + sum(sb[:i + 1]) <= t + 1e-9)
        min_b, min_a = max(0, n_items - len(na) * ka), max(0, n_items - len(nb) * kb)
        if min_a + min_b > n_items or sum(sb[:min_b]) > cap_b + 1e-9 or sum(sa[:min_a]) > cap_a + 1e-9:
            return False
        free = []
        for c in others:
            da, db = pa[ia[c]], pb[ia[c]]
            ok_a = pa[0] + da <= t + 1e-9 and (c not in pins or pins[c] in na)
            ok_b = pb[0] + db <= t + 1e-9 and (c not in pins or pins[c] in nb)
            if not ok_a and not ok_b:
                return False
            if ok_a and not ok_b:
                cap_a -= da
            elif ok_b and not ok_a:
                cap_b -= db
            else:
                free.append((da, db))
        if cap_a < -1e-9:
            return False
        need_b = sum(db for _, db in free) - cap_b
        for da, db in sorted(free, key=lambda x: -x[1] / x[0]):
            if need_b <= 1e-9 or cap_a <= 1e-9:
                break
            f = min(1.0, cap_a / da)
            cap_a -= f * da
            need_b -= f * db
        return need_b <= 1e-9

    hi = max(sum(pa[1:]) + pa[0], sum(pb[1:]) + pb[0])
    if not feasible(hi):
        return lo
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if feasible(mid) else (mid, hi)
    return lo


def pigeonhole(shares: list[float], cap: int) -> float:
    """Of the k*cap+1 longest shares some machine (GPU, or node) runs k+1: at least the k+1 shortest
    of them; 0 when there are no more shares than machines."""
    d, best, k = sorted(shares, reverse=True), 0.0, 1
    while k * cap + 1 <= len(d):
        best = max(best, sum(d[k * cap - k:k * cap + 1]))
        k += 1
    return best


def pigeonhole_bound(others, names, dur, base) -> float:
    """pigeonhole over the nodes, each item at its best duration, after the smallest baseline."""
    best = [min(dur[c].values()) for c in others]
    return min(base.values()) + pigeonhole(best, len(names)) if len(best) > len(names) else 0.0


def count_bound(shares: list[float], cap: int, lo: float = 0.0) -> float:
    """Whole items on `cap` machines (GPUs, or nodes): the smallest T >= lo such that the shares fit
    by count. Under T a machine holds at most k shares, k the most of the smallest whose sum stays
    within T; if k of them are needed somewhere (N > (k-1) * cap), at least a = N - (k-1) * cap
    machines hold k each, so the busiest of those runs at least the a * k smallest shares / a."""
    d = sorted(shares)
    n = len(d)
    if not n or cap < 1:
        return lo
    prefix = [0.0]
    for x in d:
        prefix.append(prefix[-1] + x)
    for k in range(1, n + 1):
        a = n - (k - 1) * cap
        if a > cap:          # k per machine cannot hold them all
            continue
        t = max(lo, prefix[k], prefix[a * k] / a if a > 0 else 0.0)
        if k == n or t < prefix[k + 1]:   # under t no machine holds k + 1: the count k is the one that applies
            return t
    return lo
