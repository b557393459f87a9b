"""The GPUs of a host: what `fab facts` shows and what GPU slot scheduling reads. Other modules import
these names: the facts `Gpus`, `CudaDriverVersion` and `GpuTopology`; the inventory's `gpus` as `Gpu`s;
the NVLink groups `fab bench` schedules TP servers in; `gpu_report`, the plain data the step that gathers
them reports (roles/host_facts.py `HostFacts`, `fab facts`).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from .base import Fact, lines
from ..worker.host import smi_row

QUERY_FIELDS = "index,uuid,name,memory.total,memory.used,driver_version"
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
CUDA_VERSION_RE = re.compile(r"CUDA Version: *([0-9.]+)")


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str | None
    name: str
    memory_total_mib: int | None
    memory_used_mib: int | None = None
    driver_version: str | None = None


@dataclass(frozen=True)
class GpuList:
    gpus: list[Gpu] = field(default_factory=list)
    error: str | None = None  # nvidia-smi's first line when it failed

    @property
    def visible(self) -> bool:
        return self.error is None


def _mib(text: str) -> int | None:
    text = text.strip().removesuffix("MiB").strip()
    return int(text) if text.isdigit() else None


def _na(text: str) -> str | None:
    text = text.strip()
    return None if text in ("", "[N/A]", "N/A", "[Not Supported]") else text


@dataclass(frozen=True)
class Gpus(Fact):
    """`nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,driver_version`."""

    def command(self) -> str:
        return f"nvidia-smi --query-gpu={QUERY_FIELDS} --format=csv,noheader,nounits 2>&1"

    def parse(self, stdout: str, rc: int) -> GpuList:
        got = lines(stdout)
        if rc != 0:
            why = got[0] if got else ("nvidia-smi: command not found" if rc == 127 else f"nvidia-smi exit {rc}")
            return GpuList([], why[:200])
        gpus = []
        for ln in got:
            row = smi_row(ln, QUERY_FIELDS.split(","))  # the worker's one parser of nvidia-smi's GPU lines
            if row is None or not row["index"].isdigit():
                return GpuList([], f"unexpected nvidia-smi output: {ln[:120]}")
            gpus.append(Gpu(int(row["index"]), _na(row["uuid"]), row["name"], _mib(row["memory.total"]),
                            _mib(row["memory.used"]), _na(row["driver_version"])))
        return GpuList(sorted(gpus, key=lambda g: g.index))


@dataclass(frozen=True)
class CudaDriverVersion(Fact):
    """The highest CUDA the driver supports, from nvidia-smi's header ("13.0"); None without a driver."""

    def command(self) -> str:
        return "nvidia-smi 2>&1"

    def parse(self, stdout: str, rc: int) -> str | None:
        m = CUDA_VERSION_RE.search(stdout) if rc == 0 else None
        return m.group(1) if m else None


@dataclass(frozen=True)
class GpuLink:
    a: int
    b: int
    kind: str  # "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"


@dataclass(frozen=True)
class Topology:
    links: list[GpuLink]

    def kind(self, a: int, b: int) -> str | None:
        lo, hi = min(a, b), max(a, b)
        return next((ln.kind for ln in self.links if (ln.a, ln.b) == (lo, hi)), None)


@dataclass(frozen=True)
class GpuTopology(Fact):
    """`nvidia-smi topo -m`: the GPU-to-GPU part of the matrix (NICs and affinities left out)."""

    def command(self) -> str:
        return "nvidia-smi topo -m 2>&1"

    def parse(self, stdout: str, rc: int) -> Topology | None:
        if rc != 0:
            return None
        rows = [ANSI_RE.sub("", ln) for ln in stdout.splitlines()]
        header = next((r for r in rows if r.strip().startswith("GPU0") and not re.match(r"^GPU\d+\s", r)), None)
        if header is None:
            return None
        labels = [c.strip() for c in header.split("\t")]
        links: dict[tuple[int, int], str] = {}
        for r in rows:
            m = re.match(r"^GPU(\d+)\t", r)
            if not m:
                continue
            a = int(m.group(1))
            for label, cell in zip(labels[1:], r.split("\t")[1:]):
                mb = re.fullmatch(r"GPU(\d+)", label)
                kind = cell.strip()
                if mb and kind and kind != "X":
                    b = int(mb.group(1))
                    links.setdefault((min(a, b), max(a, b)), kind)
        if not links:
            return None
        return Topology([GpuLink(a, b, k) for (a, b), k in sorted(links.items())])


def inventory_gpus(value: Any) -> list[Gpu]:
    """The inventory's `gpus` host var (validated at load) as Gpus, indexed in list order."""
    return [Gpu(i, g.get("uuid"), g["name"], int(g["memory_mib"])) for i, g in enumerate(value or [])]


def gpu_report(found: GpuList, topology: Topology | None, override: Any = None) -> dict:
    """The GPUs of a host as plain data: the inventory's `gpus` where set, else nvidia-smi's."""
    gpus = inventory_gpus(override) if override is not None else found.gpus
    return {"gpus": [asdict(g) for g in gpus],
            "gpus_source": "inventory" if override is not None else "nvidia-smi",
            "gpu_error": found.error,
            "topology": [asdict(ln) for ln in topology.links] if topology else None}


def nvlink_groups(topology: Topology | None, indices: list[int]) -> list[list[int]] | None:
    """The GPUs joined by NVLink/NVSwitch, as `gpu_groups` says it: GPUs linked by an NV* pair
    form one group (connected components; every GPU of the node in exactly one group, a GPU with
    no NVLink alone). None: no topology, or no NVLink at all (PCIe only): any set will do, since
    a TP server over PCIe still runs (slower), and a constraint would only forbid it."""
    if topology is None:
        return None
    group = {i: {i} for i in indices}
    linked = False
    for ln in topology.links:
        if ln.a in group and ln.b in group and ln.kind.startswith("NV"):
            linked = True
            if group[ln.a] is not group[ln.b]:
                merged = group[ln.a] | group[ln.b]
                for i in merged:
                    group[i] = merged
    if not linked:
        return None
    return sorted(sorted(g) for g in {id(g): g for g in group.values()}.values())
