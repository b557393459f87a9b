"""Equivalence across the GPUs of one node (issue 15): a GPU with a lower clock or a thermal limit is
the same trap as a slow node. gate.check_equivalence calls gpu_checks after its node pairs.

Each run's record says where it ran (`gpus`, `packing`: the runner's slot pool fills them on nodes
with several GPUs; older results: their metadata, through resultfile/legacy.py). On a node whose configurations ran on more than one GPU set,
the baseline's runs on each set are compared pairwise with the node rule (gate.decide): with
`equivalence.every_gpu` the baseline ran once per GPU (plan.gpu_copy names those runs). Where the
baseline ran on one set only, the check says "not checked" and why.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import TYPE_CHECKING

from ...plan import copy_of

if TYPE_CHECKING:
    from ..scan.folder import CollectedFolder

ONE_GPU = "not recorded (the one-GPU runner: the node's GPU)"


def gpu_set(run) -> str | None:
    gpus = run.record.gpus if run.record else None
    return ",".join(str(g.get("uuid")) for g in gpus) if gpus else None


def where(run) -> str:
    """'GPU-… (NVIDIA H200)' per GPU of the run's set, or ONE_GPU."""
    uuids = gpu_set(run)
    if not uuids:
        return ONE_GPU
    names = [str(g.get("name") or "") for g in run.record.gpus]
    return ", ".join(f"{u} ({n})" if n else u for u, n in itertools.zip_longest(uuids.split(","), names[:len(
        uuids.split(","))], fillvalue=""))


def packing_of(camp: "CollectedFolder") -> str:
    """What the report says about packing: the results' stamp, or the one-GPU runner's one server."""
    seen = sorted({r.record.packing for r in camp.runs if r.record and r.record.packing})
    if not seen:
        return "exclusive (one server per node at a time: the one-GPU runner)"
    say = {"exclusive": "exclusive (one server per node at a time)",
           "shared": ("shared (several servers per node at once on disjoint GPUs: they share the host's CPU, "
                      "PCIe and memory bandwidth, which can skew the comparison)")}
    return "; ".join(say.get(s, s) for s in seen) + (" -- MIXED across results" if len(seen) > 1 else "")


def split_off_gpu_copies(camp: "CollectedFolder", baseline: str) -> "CollectedFolder":
    """The campaign without the baseline's runs on other GPUs: they serve the GPU check, not the tables
    (the baseline's own runs are the node's reference)."""
    keep = lambda config: copy_of(config, baseline) is None  # noqa: E731
    return dataclasses.replace(camp, runs=[r for r in camp.runs if keep(r.config)],
                               kv=[k for k in camp.kv if keep(k.config)])


def gpu_checks(camp: "CollectedFolder", rule, baseline: str, decide, samples_of) -> tuple[list, list[str]]:
    """(PairChecks labelled 'node [set]', notes) for the nodes whose configurations used several GPU sets."""
    checks, notes = [], []
    for host in camp.hosts:
        runs = [r for r in camp.runs if r.host == host]
        sets = sorted({s for s in map(gpu_set, runs) if s})
        if len(sets) < 2:
            continue
        # the baseline, or its runs on other GPUs (equivalence.every_gpu)
        base_runs = [r for r in runs if r.config == baseline or copy_of(r.config, baseline) is not None]
        base_sets = sorted({gpu_set(r) for r in base_runs if gpu_set(r)})
        if len(base_sets) < 2:
            notes.append(f"equivalence across the GPUs of {host}: not checked -- its configurations ran on "
                         f"{len(sets)} GPU sets, the baseline '{baseline}' on "
                         f"{base_sets[0] if base_sets else 'none'} only, so a slower GPU there (clock, thermal "
                         "limit) would read as a configuration effect; equivalence.every_gpu: true in the plan "
                         "runs the baseline on every GPU; else compare nvidia-smi -q -d CLOCK,PERFORMANCE")
            continue
        per = {s: samples_of([r for r in base_runs if gpu_set(r) == s]) for s in base_sets}
        for a, b in itertools.combinations(base_sets, 2):
            for conc in sorted(set(per[a]) & set(per[b])):
                if rule.concurrency is not None and conc != rule.concurrency:
                    continue
                x, y = per[a][conc], per[b][conc]   # runs sharing a server start count once (gate.decide)
                chk = decide(rule, x[rule.metric], y[rule.metric], x.get("start"), y.get("start"))
                chk.node_a, chk.node_b, chk.conc = f"{host} [{a}]", f"{host} [{b}]", conc
                checks.append(chk)
    return checks, notes
