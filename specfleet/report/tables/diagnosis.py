"""Diagnosis read from the result files themselves (issue 23): waves, loops, greedy divergence, the
memory-bandwidth bound from the GPU's name (docs/report.md, "Conclusions": Outputs, Bound).

A run of fewer than MIN_WAVES waves drains: its output tok/s follows the last requests. n-gram
speculation drafts from the text itself, so a looping output accepts everything: such a speedup
measures the loop. Speculative decoding is lossless under greedy decoding: greedy outputs that differ
are numerics (batch-dependent kernels) or a loop.
"""
from __future__ import annotations

import re

from ...untrusted_json import loads

MIN_WAVES = 5.0
LOOP_MAX_PERIOD = 30
LOOP_MIN_REPEATS = 3
LOOP_MATCH = 0.9
LOOP_MIN_WORDS = 30
#: DEGENERATE when at least this share of a configuration's requests loop (measures.acceptance_flag)
LOOP_SHARE_DEGENERATE = 0.25
#: decode below this fraction of the bandwidth bound: launch/overhead-bound
OVERHEAD_BOUND_FRACTION = 0.2

# GB/s, the vendor's datasheet figure (HBM / GDDR peak), matched on the nvidia-smi name (first match)
BANDWIDTH_GBPS: list[tuple[str, float, str]] = [
    (r"GH200", 4900.0, "NVIDIA GH200 datasheet (HBM3e 144 GB)"),
    (r"H200", 4800.0, "NVIDIA H200 datasheet (SXM, HBM3e)"),
    (r"H100.*NVL", 3900.0, "NVIDIA H100 NVL datasheet"),
    (r"H100.*PCIe", 2000.0, "NVIDIA H100 PCIe datasheet"),
    (r"H100", 3350.0, "NVIDIA H100 SXM datasheet (HBM3)"),
    (r"H800", 3350.0, "NVIDIA H800 SXM datasheet"),
    (r"B200", 8000.0, "NVIDIA B200 datasheet (HBM3e)"),
    (r"A100.*80GB", 2039.0, "NVIDIA A100 80GB SXM datasheet"),
    (r"A100", 1555.0, "NVIDIA A100 40GB datasheet"),
    (r"L40S", 864.0, "NVIDIA L40S datasheet"),
    (r"L40", 864.0, "NVIDIA L40 datasheet"),
    (r"\bL4\b", 300.0, "NVIDIA L4 datasheet"),
    (r"A10\b", 600.0, "NVIDIA A10 datasheet"),
    (r"RTX PRO 6000", 1792.0, "NVIDIA RTX PRO 6000 Blackwell datasheet"),
    (r"MI300X", 5300.0, "AMD Instinct MI300X datasheet"),
    (r"MI325X", 6000.0, "AMD Instinct MI325X datasheet"),
]


def bandwidth_of(gpu: str | None) -> tuple[float, str] | None:
    """(GB/s, source) for a GPU name, or None when it is not a listed one."""
    for pat, gbps, src in BANDWIDTH_GBPS:
        if gpu and re.search(pat, gpu, re.I):
            return gbps, src
    return None


def waves(res) -> float | None:
    c = res.max_concurrency
    return res.completed / c if c and c > 1 else None


def loops(text: str | None) -> bool:
    words = (text or "").split()
    if len(words) < LOOP_MIN_WORDS:
        return False
    for p in range(1, LOOP_MAX_PERIOD + 1):
        tail = words[-min(len(words), max(LOOP_MIN_WORDS, p * LOOP_MIN_REPEATS)):]
        if len(tail) < p * LOOP_MIN_REPEATS:
            break
        same = sum(tail[i] == tail[i - p] for i in range(p, len(tail)))
        if same >= LOOP_MATCH * (len(tail) - p):
            return True
    return False


def loop_share(runs) -> float | None:
    texts = [t for r in runs for t in (r.result.generated_texts or [])]
    return sum(map(loops, texts)) / len(texts) if texts else None


def _greedy(res) -> bool:
    if res.extra.get("decoding"):
        return str(res.extra["decoding"]) == "greedy"
    try:
        sp = loads(str(res.extra.get("sampling_params") or "null"))
    except ValueError:
        return False
    return isinstance(sp, dict) and sp.get("temperature") is not None and float(sp["temperature"]) == 0.0


def greedy_divergence(runs, base_runs) -> tuple[float, int] | None:
    """(share of compared requests whose text differs, requests compared) over the first repeat of each
    side, greedy on both; None when either side is not greedy or has no texts."""
    if not runs or not base_runs:
        return None
    a, b = base_runs[0].result, runs[0].result
    if not (_greedy(a) and _greedy(b)) or not a.generated_texts or not b.generated_texts:
        return None
    la, lb = a.input_lens or [], b.input_lens or []
    pairs = [(x, y) for i, (x, y) in enumerate(zip(a.generated_texts, b.generated_texts))
             if not (la and lb) or (i < len(la) and i < len(lb) and la[i] == lb[i])]
    if not pairs:
        return None
    return sum(x != y for x, y in pairs) / len(pairs), len(pairs)
