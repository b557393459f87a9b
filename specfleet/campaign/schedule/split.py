"""Split a plan's configurations across nodes to minimise the campaign's makespan.

Every node runs the baseline first (the report's node-equivalence check, §5.1); every other
configuration runs on exactly one node. An item's duration on a node is

    load (weights / the node's read bandwidth + start-up) + benchmark (output tokens / speed)

where the read bandwidth depends on where the node reads the model from (`model_source`:
`local` ~2 GB/s, `nfs` ~105 MB/s, report §3.1/§5.2), and the speed is the baseline's
throughput at each concurrency times a per-method relative speed. Durations measured in an
earlier campaign (e.g. the report's, REPORT_DURATIONS) replace the estimates.

The search (class OneGpuSearch) and the lower bound the result carries: docs/campaign.md "4. The split".
"""
from __future__ import annotations

import bisect
import dataclasses
import heapq
import random
from dataclasses import dataclass

from ...facts.gpus import GpuList, Topology, nvlink_groups
from .bounds import count_bound, pigeonhole_bound, two_class_bound
from ..commands import server_per_repeat
from ...plan import NGRAM_METHODS, Plan, PlanError, gpus_needed
from .gpusets import parse_gpus, parse_groups
from .slotsplit import Split, durations_by_twin, needs_slots, slot_split

READ_MB_S = {"local": 2000.0, "nfs": 105.0}
STARTUP_S = 60.0          # torch.compile, CUDA graphs, warm-up after the weights are read
GPU_BW_GB_S = 1792.0      # RTX PRO 6000 Blackwell; only used when nothing better is known
DECODE_EFFICIENCY = 0.78  # report: 21.29 tok/s measured vs 1792 GB/s / 65.5 GB = 27.4
CONC_EXPONENT = 0.955     # report: 301.19 / 21.29 = 14.1 = 16 ** 0.955
METHOD_SPEED = {None: 1.0, **dict.fromkeys(NGRAM_METHODS, 1.1), "suffix": 1.2,
                "eagle": 1.8, "eagle3": 2.0, "mtp": 1.8, "draft_model": 1.5, "medusa": 1.5}
TP_EXPONENT = 0.8         # estimate: n GPUs decode n ** 0.8 x faster (all-reduce per layer); not measured
BENCH_OVERHEAD_S = 15.0   # client start, tokenizer load, warm-up, result write per bench run
# moves and swaps looked at per split, at most: fab bench waits on the split (~1 us each); the split is
# then the best found -- deterministic, not timed
MAX_TRIALS = 400_000

# The report's measured benchmark durations (s) per concurrency (§4.1) and its NFS load (~10 min).
REPORT_DURATIONS: dict[str, dict] = {
    "vanilla": {"bench_s": {1: 378.65, 16: 26.61}},
    "ngram": {"bench_s": {1: 357.42, 16: 28.48}},
    "ngram_improved": {"bench_s": {1: 324.43, 16: 26.41}},
    "eagle3": {"bench_s": {1: 178.13, 16: 14.56}},
}


@dataclass(frozen=True)
class NodeInfo:
    """What the split needs to know about a node (from inventory vars)."""

    name: str
    model_source: str = "nfs"          # 'local' or 'nfs'
    read_mb_s: float | None = None     # measured read bandwidth overrides the source's default
    gpus: tuple = ()                   # ({index, uuid?, name?}, ...) from inventory `gpus`; () = one GPU
    gpu_groups: tuple | None = None    # NVLink groups of GPU indices (inventory `gpu_groups`); None = any
    gpus_source: str = "inventory"     # where `gpus` came from: "inventory" or "nvidia-smi"
    groups_source: str = "inventory"   # where `gpu_groups` came from, or why there are none

    @classmethod
    def from_vars(cls, name: str, vars_: dict) -> "NodeInfo":
        """From inventory host vars `model_source` (local|nfs), `model_read_mb_s`, `gpus`, `gpu_groups`."""
        mbs = vars_.get("model_read_mb_s")
        try:
            gpus = parse_gpus(vars_["gpus"], f"host {name!r}") if vars_.get("gpus") is not None else []
            groups = parse_groups(vars_.get("gpu_groups"), [g["index"] for g in gpus] or [0], f"host {name!r}")
        except ValueError as e:
            raise PlanError(f"inventory: {e}") from None
        return cls(name, str(vars_.get("model_source", "nfs")), float(mbs) if mbs else None,
                   tuple(gpus), tuple(tuple(g) for g in groups) if groups else None)

    @classmethod
    def from_facts(cls, name: str, vars_: dict, found: GpuList | None, topology: Topology | None) -> "NodeInfo":
        """From the inventory vars and the host's GPU facts (`fab bench`'s probe): the inventory's
        `gpus` wins where set; else nvidia-smi's GPUs, and, without `gpu_groups`, the NVLink groups
        the topology shows. PlanError (one line naming the host) when nvidia-smi failed and the
        inventory does not say."""
        if vars_.get("gpus") is not None or found is None:
            node = cls.from_vars(name, vars_)
            why = "inventory" if vars_.get("gpu_groups") is not None else "none: no gpu_groups in the inventory"
            return dataclasses.replace(node, groups_source=why)
        if found.error or not found.gpus:
            raise PlanError(f"host {name!r}: nvidia-smi: {found.error or 'lists no GPU'} "
                            f"(fix the driver, or set the host's `gpus` in the inventory)")
        gpus = [{"index": g.index, "name": g.name, **({"uuid": g.uuid} if g.uuid else {}),
                 **({"memory_mib": g.memory_total_mib} if g.memory_total_mib else {})} for g in found.gpus]
        try:
            gpus = parse_gpus(gpus, f"host {name!r} (nvidia-smi)")
            indices = [g["index"] for g in gpus]
            if vars_.get("gpu_groups") is not None:
                groups, why = parse_groups(vars_["gpu_groups"], indices, f"host {name!r}"), "inventory"
            else:
                groups = nvlink_groups(topology, indices)
                why = ("nvidia-smi topo" if groups else
                       "none: nvidia-smi shows no topology" if topology is None else
                       "none: PCIe only, no NVLink between GPUs")
        except ValueError as e:
            raise PlanError(f"inventory: {e}") from None
        node = cls.from_vars(name, {k: v for k, v in vars_.items() if k != "gpu_groups"})  # checked above
        return dataclasses.replace(node, gpus=tuple(gpus), gpu_groups=tuple(tuple(g) for g in groups) if groups else None,
                                   gpus_source="nvidia-smi", groups_source=why)

    def describe(self) -> str:
        """One line for the printed split: the node's GPUs and NVLink groups, and where they came from."""
        n = len(self.gpus) or 1
        gpus = f"{n} GPU{'s' if n > 1 else ''} ({self.gpus_source if self.gpus else 'none listed: one GPU'})"
        if n == 1:
            return gpus
        groups = " ".join("[" + ",".join(map(str, g)) + "]" for g in self.gpu_groups) if self.gpu_groups else "any set"
        return f"{gpus}, NVLink groups {groups} ({self.groups_source})"

    @property
    def bandwidth_mb_s(self) -> float:
        if self.read_mb_s:
            return self.read_mb_s
        if self.model_source not in READ_MB_S:
            raise PlanError(f"node {self.name!r}: model_source must be one of {sorted(READ_MB_S)}")
        return READ_MB_S[self.model_source]


def load_s(plan: Plan, config: str, node: NodeInfo) -> float:
    c = plan.config(config)
    if c.load_estimate_s is not None:
        return c.load_estimate_s
    size_mb = plan.model.weights_gib * 1073.741824
    return size_mb / node.bandwidth_mb_s + STARTUP_S


def bench_s(plan: Plan, config: str, measured: dict | None = None) -> float:
    """Benchmark time of one configuration over all its bench cells and repeats (one server start)."""
    b = plan.benchmark
    c = plan.config(config)
    total = 0.0
    for cell in b.cells:
        conc, prompts, out = cell.concurrency, cell.num_prompts, cell.output_len
        if measured and conc in measured.get("bench_s", {}):
            one = measured["bench_s"][conc] * prompts * out / (16 * 512)
        else:
            tok_s1 = DECODE_EFFICIENCY * GPU_BW_GB_S / (plan.model.weights_gib * 1.073741824)
            tok_s = tok_s1 * min(conc, prompts) ** CONC_EXPONENT * METHOD_SPEED.get(c.method, 1.0)
            one = prompts * out / tok_s / gpus_needed(plan, config) ** TP_EXPONENT
        total += (one + BENCH_OVERHEAD_S) * b.repeat
    return total


def item_s(plan: Plan, config: str, node: NodeInfo, durations: dict[str, dict] | None = None) -> float:
    """Estimated wall time of one queue item (load + benchmark + restarts the policy needs)."""
    measured = (durations or {}).get(config)
    load = measured["load_s"] if measured and "load_s" in measured else load_s(plan, config, node)
    b = plan.benchmark
    loads = len(b.cells) * b.repeat if plan.server.prefix_cache == "fresh-server-per-concurrency" else \
        b.repeat if server_per_repeat(plan) else 1   # the configuration's items: a start per repeat
    return load * loads + bench_s(plan, config, measured)


def parse_pins(specs: list[str] | str | None) -> dict[str, str]:
    """'eagle3=w2,ngram=w1' or ['eagle3=w2'] -> {'eagle3': 'w2'}."""
    if not specs:
        return {}
    if isinstance(specs, str):
        specs = [specs]
    pins: dict[str, str] = {}
    for part in (p.strip() for s in specs for p in s.split(",")):
        if not part:
            continue
        cfg, sep, node = part.partition("=")
        if not sep or not cfg.strip() or not node.strip():
            raise PlanError(f"--assign {part!r}: expected CONFIG=NODE")
        pins[cfg.strip()] = node.strip()
    return pins


def node_classes(twins: list[list[str]], configs: list[str], dur) -> list[list[str]]:
    """Nodes that give every configuration the same duration, in the nodes' order: twins always do."""
    by_profile: dict[tuple, list[str]] = {}
    for members in twins:
        by_profile.setdefault(tuple(dur[c][members[0]] for c in configs), []).extend(members)
    return list(by_profile.values())


def split(plan: Plan, nodes: list[NodeInfo], pins: dict[str, str] | None = None,
          durations: dict[str, dict] | None = None, max_expansions: int = 20_000) -> Split:
    if not nodes:
        raise PlanError("no nodes selected for the campaign")
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise PlanError(f"a node is listed twice: {names}")
    pins = dict(pins or {})
    for cfg, node in pins.items():
        if not any(c.name == cfg for c in plan.configurations):
            known = ", ".join(c.name for c in plan.configurations)
            raise PlanError(f"--assign {cfg}=...: the plan has no configuration {cfg!r} (have: {known})")
        if node not in names:
            raise PlanError(f"--assign {cfg}={node}: {node!r} is not a selected node ({', '.join(names)})")
        if cfg == plan.baseline:
            raise PlanError(f"--assign {cfg}={node}: the baseline runs on every node anyway")
    if needs_slots(plan, nodes):  # several GPUs per node, or configurations that say where they run
        return slot_split(plan, nodes, pins, item_s, durations)
    others = [c.name for c in plan.configurations if c.name != plan.baseline]
    dur, twins = durations_by_twin(plan, [plan.baseline, *others], nodes, item_s, durations)
    base = {n: dur[plan.baseline][n] for n in names}
    classes = node_classes(twins, [plan.baseline, *others], dur)
    heads = [members[0] for members in classes]   # one node per class stands for the others in the bounds

    # Lower bound: every node runs its baseline; each other item runs somewhere at least at its best.
    best = {c: min(dur[c].values()) for c in others}
    lb = max(
        (sum(base.values()) + sum(best.values())) / len(names),
        max(base.values()),
        max((min(base[n] + dur[c][n] for n in heads) for c in others), default=0.0),
    )
    lb = max(lb, two_class_bound(others, classes, dur, base, pins, lb),
             pigeonhole_bound(others, names, dur, base), count_bound([*base.values(), *best.values()], len(names)),
             # every node runs its baseline before its items: after the smallest one, the items alone by count
             # (35 items of 14-20 min on 8 nodes: 3 nodes run 5, at least the 15 shortest / 3 after the baseline)
             min(base.values()) + count_bound(list(best.values()), len(names)))
    f = OneGpuSearch(others, names, classes, dur, base, pins, lb)
    assign = f.improve(f.lpt())
    method = "heuristic"
    if f.span(assign) > lb + 1e-9:
        assign = f.perturb(assign)
        packed = f.pack_search(lb, f.span(assign))
        if packed is not None:
            packed = f.improve(packed)
            if f.span(packed) <= f.span(assign) + 1e-9:
                assign = packed
        exact = f.branch_and_bound(assign, max_expansions)
        if exact is not None:
            assign, method = exact, "exact"
    else:  # the split reaches the lower bound: no split is shorter
        method = "exact"
    load = f.loads(assign)
    queues = {n: [plan.baseline] + [c for c in others if assign[c] == n] for n in names}
    return Split(queues=queues, node_s=load, makespan_s=max(load.values()), lower_bound_s=lb,
                 method=method, durations=dur)


class OneGpuSearch:
    """The one-GPU split's search over `others` (config names other than the baseline) on nodes `names`,
    with dur[config][node] and base[node] seconds. Nodes that give every item the same duration
    (and the same baseline) form a class: within a class only the least-loaded node is worth trying,
    so moves cost items x classes, not items x nodes. Trials (each move or swap looked at) are
    counted; past MAX_TRIALS the search stops with the best found (deterministic, not timed)."""

    def __init__(self, others, names, classes, dur, base, pins, lb):
        self.others, self.names, self.dur, self.base, self.pins = others, names, dur, base, pins
        self.lb = lb
        self.free = [c for c in others if c not in pins]
        self.longest_first = sorted(self.free, key=lambda c: -min(dur[c].values()))
        self.fixed = {c: pins[c] for c in others if c in pins}   # the pinned items, where they run
        self.pos = {n: i for i, n in enumerate(names)}
        self.classes = classes    # node_classes: the nodes that give every item the same duration
        self.class_of = {n: k for k, members in enumerate(self.classes) for n in members}
        self.trials = 0

    @property
    def spent(self) -> bool:
        return self.trials >= MAX_TRIALS

    def loads(self, assign) -> dict[str, float]:
        load = dict(self.base)
        for c, n in assign.items():
            load[n] += self.dur[c][n]
        return load

    def span(self, assign) -> float:
        return max(self.loads(assign).values())

    def lpt(self) -> dict[str, str]:
        """Longest item first onto the node where it ends soonest (a heap per node class)."""
        dur, assign = self.dur, dict(self.fixed)
        load = self.loads(assign)
        heaps = [[(load[n], self.pos[n], n) for n in members] for members in self.classes]
        for h in heaps:
            heapq.heapify(h)
        for c in self.longest_first:
            k = min(range(len(heaps)), key=lambda k: (heaps[k][0][0] + dur[c][heaps[k][0][2]], heaps[k][0][:2]))
            ld, p, n = heaps[k][0]
            heapq.heapreplace(heaps[k], (ld + dur[c][n], p, n))
            assign[c] = n
        return assign

    def improve(self, assign) -> dict[str, str]:
        """Moves (to each class's least-loaded node) and swaps (every pair on two nodes) while they
        lower (makespan, sum of squares), until the makespan is the lower bound or MAX_TRIALS."""
        assign, dur, pos = dict(assign), self.dur, self.pos
        load = self.loads(assign)

        def rank(n: str) -> tuple:
            return load[n], pos[n]

        low = [heapq.nsmallest(2, members, key=rank) for members in self.classes]   # per class, its two least loaded

        def lowest(k: int, skip: str) -> str | None:
            return next((n for n in low[k] if n != skip), None)

        improved = True
        while improved and not self.spent and max(load.values()) > self.lb + 1e-9:   # at the bound: optimal
            improved = False
            top = max(load.values())
            ssq = sum(v * v for v in load.values())
            tops = heapq.nlargest(3, self.names, key=lambda n: (load[n], -pos[n]))

            def better(a, la, b, lb_) -> bool:
                self.trials += 1
                rest = next((load[n] for n in tops if n != a and n != b), 0.0)
                m = max(rest, la, lb_)
                if m < top - 1e-9:
                    return True
                return m <= top + 1e-9 and ssq - load[a] ** 2 - load[b] ** 2 + la * la + lb_ * lb_ < ssq - 1e-6

            def accept(*moved: str) -> None:
                nonlocal improved, top, ssq, tops
                improved = True
                for k in {self.class_of[n] for n in moved}:
                    low[k] = heapq.nsmallest(2, self.classes[k], key=rank)
                top, ssq = max(load.values()), sum(v * v for v in load.values())
                tops = heapq.nlargest(3, self.names, key=lambda n: (load[n], -pos[n]))

            for c in self.free:
                if self.spent or top <= self.lb + 1e-9:
                    break
                a = assign[c]
                for k in range(len(self.classes)):
                    n = lowest(k, a)
                    if n is not None and better(a, load[a] - dur[c][a], n, load[n] + dur[c][n]):
                        load[a] -= dur[c][a]
                        load[n] += dur[c][n]
                        assign[c] = n
                        accept(a, n)
                        a = n
            for i, c in enumerate(self.free):
                if self.spent or top <= self.lb + 1e-9:
                    break
                for c2 in self.free[i + 1:]:
                    a, b = assign[c], assign[c2]
                    if b == a:
                        continue
                    la, lb_ = load[a] - dur[c][a] + dur[c2][a], load[b] - dur[c2][b] + dur[c][b]
                    if better(a, la, b, lb_):
                        load[a], load[b] = la, lb_
                        assign[c], assign[c2] = b, a
                        accept(a, b)
        return assign

    def pack_search(self, lo: float, hi: float, steps: int = 25):
        """Binary search the smallest T for which best-fit-decreasing packs every item under T: each
        item onto the node where it is cheapest, then the fullest that stays under T (per class, a
        sorted row of loads and bisect)."""
        dur, fixed = self.dur, self.fixed
        load0 = self.loads(fixed)

        def pack(t: float):
            assign = dict(fixed)
            rows = [sorted((load0[n], self.pos[n], n) for n in members) for members in self.classes]
            for c in self.longest_first:
                pick = None
                for k, row in enumerate(rows):
                    d = dur[c][row[0][2]]
                    i = bisect.bisect_right(row, (t + 1e-9 - d, len(self.names), ""))
                    if i == 0:
                        continue
                    j = bisect.bisect_left(row, (row[i - 1][0], -1, ""))   # that load, the first node
                    pick = min(pick or (d, -(row[j][0] + d), row[j][1], k, j), (d, -(row[j][0] + d), row[j][1], k, j))
                if pick is None:
                    return None
                d, _, _, k, j = pick
                ld, p, n = rows[k].pop(j)
                bisect.insort(rows[k], (ld + d, p, n))
                assign[c] = n
            return assign

        best = None
        for _ in range(steps):
            mid = (lo + hi) / 2
            got = pack(mid)
            if got is None:
                lo = mid
            else:
                best, hi = got, mid
        return best

    def perturb(self, assign, rounds: int = 60):
        """Iterated local search: shake a few items off the critical node, re-improve, keep the best."""
        free, names = self.free, self.names
        if len(names) < 2 or not free:
            return assign
        rng = random.Random(0)  # deterministic: the same plan always gives the same split
        best, best_span = dict(assign), self.span(assign)
        cur = dict(assign)
        for _ in range(rounds):
            if best_span <= self.lb * 1.0001 or self.spent:
                break
            load = self.loads(cur)
            crit = max(names, key=lambda n: load[n])
            on_crit = [c for c in free if cur[c] == crit] or free
            trial = dict(cur)
            for c in rng.sample(on_crit, min(len(on_crit), rng.randint(1, 2))):
                trial[c] = rng.choice([n for n in names if n != crit])
            for c in rng.sample(free, min(len(free), rng.randint(0, 2))):
                trial[c] = rng.choice(names)
            trial = self.improve(trial)
            t_span = self.span(trial)
            if t_span < best_span - 1e-9:
                best, best_span = dict(trial), t_span
            cur = trial if t_span <= self.span(cur) * 1.02 else dict(best)
        return best

    def branch_and_bound(self, start, max_expansions):
        """Exact minimum makespan, or None if the effort limit is hit first (an expansion costs one
        unit per 8 nodes: it sorts them)."""
        dur, names, fixed, free = self.dur, self.names, self.fixed, self.longest_first
        load0 = self.loads(fixed)
        best_val = self.span(start)
        best = dict(start)
        remaining_min = [sum(min(dur[c].values()) for c in free[i:]) for i in range(len(free) + 1)]
        budget = [float(max_expansions)]
        cost = max(1.0, len(names) / 8)
        cur: dict[str, str] = {}

        def rec(i: int, load: dict[str, float]) -> bool:
            nonlocal best_val, best
            budget[0] -= cost
            if budget[0] < 0:
                return False
            if i == len(free):
                m = max(load.values())
                if m < best_val - 1e-9:
                    best_val, best = m, {**fixed, **cur}
                return True
            if max(max(load.values()), (sum(load.values()) + remaining_min[i]) / len(names)) >= best_val - 1e-9:
                return True
            c = free[i]
            seen = set()
            for n in sorted(names, key=lambda n: load[n] + dur[c][n]):
                key = (self.class_of[n], round(load[n], 6))   # interchangeable nodes: try one
                if key in seen:
                    continue
                seen.add(key)
                if load[n] + dur[c][n] >= best_val - 1e-9:
                    continue
                cur[c] = n
                load[n] += dur[c][n]
                ok = rec(i + 1, load)
                load[n] -= dur[c][n]
                del cur[c]
                if not ok:
                    return False
            return True

        return best if rec(0, dict(load0)) else None


def format_split(s: Split, nodes: list[NodeInfo] | None = None) -> str:
    lines = [f"{n.name:>10}  {n.describe()}" for n in nodes or []]
    for n, q in s.queues.items():
        lines.append(f"{n:>10}  {s.node_s[n] / 60:7.1f} min  {' -> '.join(q)}")
    lines.append(f"makespan {s.makespan_s / 60:.1f} min, lower bound {s.lower_bound_s / 60:.1f} min "
                 f"(x{s.ratio:.3f}, {s.method})")
    return "\n".join(lines)
