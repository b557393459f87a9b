"""Split a plan's configurations across nodes to minimise the campaign's makespan.

Every node runs the baseline first (the report's node-equivalence check, §5.1); every other
configuration runs on exactly one node. An item's duration on a node is

    load (weights / the node's read bandwidth + start-up) + benchmark (output tokens / speed)

where the read bandwidth depends on where the node reads the model from (`model_source`:
`local` ~2 GB/s, `nfs` ~105 MB/s, report §3.1/§5.2), and the speed is the baseline's
throughput at each concurrency times a per-method relative speed. Durations measured in an
earlier campaign (e.g. the report's, REPORT_DURATIONS) replace the estimates.

The search (slotsplit.Search, over GPU slots: a one-GPU node is one slot) and the lower bound the
result carries: docs/campaign.md "4. The split".
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...facts.gpus import GpuList, Topology, nvlink_groups
from ..commands import server_per_repeat
from ...plan import NGRAM_METHODS, Plan, PlanError, gpus_needed
from .gpusets import parse_gpus, parse_groups
from .slotsplit import Split, slot_split

READ_MB_S = {"local": 2000.0, "nfs": 105.0}
STARTUP_S = 60.0          # torch.compile, CUDA graphs, warm-up after the weights are read
GPU_BW_GB_S = 1792.0      # RTX PRO 6000 Blackwell; only used when nothing better is known
DECODE_EFFICIENCY = 0.78  # report: 21.29 tok/s measured vs 1792 GB/s / 65.5 GB = 27.4
CONC_EXPONENT = 0.955     # report: 301.19 / 21.29 = 14.1 = 16 ** 0.955
METHOD_SPEED = {None: 1.0, **dict.fromkeys(NGRAM_METHODS, 1.1), "suffix": 1.2,
                "eagle": 1.8, "eagle3": 2.0, "mtp": 1.8, "draft_model": 1.5, "medusa": 1.5}
TP_EXPONENT = 0.8         # estimate: n GPUs decode n ** 0.8 x faster (all-reduce per layer); not measured
BENCH_OVERHEAD_S = 15.0   # client start, tokenizer load, warm-up, result write per bench run
# what the printed split says when no item was measured
MODEL_SOURCE = "the duration model (estimates: METHOD_SPEED, TP_EXPONENT are not measured)"

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
    """Wall time of one queue item: measured (durations[config]["item_s"]: node -> seconds, measured.py;
    a node that did not run it: the mean of those that did), else estimated (load + benchmark + the
    restarts the policy needs; durations[config] "load_s"/"bench_s" replace the model's parts)."""
    measured = (durations or {}).get(config)
    if measured and measured.get("item_s"):
        per_node = measured["item_s"]
        return per_node.get(node.name, sum(per_node.values()) / len(per_node))
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


def split(plan: Plan, nodes: list[NodeInfo], pins: dict[str, str] | None = None,
          durations: dict[str, dict] | None = None, source: str | None = None) -> Split:
    """The one split (slotsplit.slot_split: a search over the nodes' GPU slots; a one-GPU node is a
    node of one slot). `durations` (config -> measured seconds, measured.py) replace the model's
    estimates where given; `source` says where they came from (printed with the predicted makespan)."""
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
    s = slot_split(plan, nodes, pins, item_s, durations)
    s.source = source or (MODEL_SOURCE if not durations else "the durations given")
    return s


def format_split(s: Split, nodes: list[NodeInfo] | None = None) -> str:
    lines = [f"{n.name:>10}  {n.describe()}" for n in nodes or []]
    for n, q in s.queues.items():
        lines.append(f"{n:>10}  {s.node_s[n] / 60:7.1f} min  {' -> '.join(q)}")
    lines.append(f"predicted makespan {s.makespan_s / 60:.1f} min, lower bound {s.lower_bound_s / 60:.1f} min "
                 f"(x{s.ratio:.3f}, {s.method}); durations: {s.source}")
    return "\n".join(lines)
