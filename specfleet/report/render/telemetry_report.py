"""Telemetry of each run (the worker's `<result>.telemetry.jsonl`, specfleet/worker/telemetry.py) in the
report: the table per run, a timeline plot, and, when the gate fails, how the nodes' telemetry differs
(docs/telemetry.md: the columns). The samples span the whole `vllm bench serve` process (warm-ups
included), the duration is the measured window's: J / output token is the mean power's, not an
integral over the window. A run whose file has no GPU samples is "not recorded"; a bad line is skipped.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ... import untrusted_json
from ...worker import layout
from ..scan.folder import Campaign, Run

NOT_RECORDED = "not recorded"
# nvidia-smi clock-event reasons (nvml.h, nvmlClocksEventReason*): the ones that slow a GPU down
THROTTLE = {0x4: "SW power cap", 0x8: "HW slowdown", 0x20: "sync boost", 0x40: "SW thermal",
            0x80: "HW thermal", 0x100: "HW power brake"}
TIMELINE_IMAGE = "telemetry-timeline.svg"


@dataclass
class RunTelemetry:
    samples: int = 0
    gpu_samples: int = 0
    power_w: float = math.nan          # mean over samples of the sum over the run's GPUs
    sm_mhz: float = math.nan
    temp_max_c: float = math.nan
    util_pct: float = math.nan
    throttle: list[str] = field(default_factory=list)
    running_max: float = math.nan
    waiting_max: float = math.nan
    kv_usage_max: float = math.nan
    preemptions: float = math.nan      # counter difference over the run
    problems: list[str] = field(default_factory=list)
    series: list[dict] = field(default_factory=list)   # t, power_w, running, tokens_s

    @property
    def recorded(self) -> bool:
        return self.gpu_samples > 0


def _f(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def read_run(path: Path) -> RunTelemetry | None:
    """None when there is no file; otherwise what it holds (problems say what was not recorded)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    t = RunTelemetry()
    power, sm, temp, util, run_, wait, kv, pre, masks = [], [], [], [], [], [], [], [], 0
    prev_tokens = None
    for n, ln in enumerate(lines, 1):
        try:
            d = untrusted_json.loads(ln)
        except untrusted_json.UntrustedJSON as e:  # hostile, not half-written: say so, read on
            t.problems.append(f"{path.name} line {n} refused: {e}")
            continue
        except ValueError:
            continue
        if not isinstance(d, dict):
            continue
        if d.get("kind") == "header":
            t.problems += [str(p) for p in d.get("problems") or []]
            continue
        if d.get("kind") != "sample":
            continue
        t.samples += 1
        point = {"t": _f(d.get("t"))}
        gpus = [g for g in d.get("gpus") or [] if isinstance(g, dict)]
        if gpus and all(_f(g.get("power_w")) is not None for g in gpus):
            t.gpu_samples += 1
            power.append(sum(_f(g["power_w"]) for g in gpus))
            point["power_w"] = power[-1]
        for g in gpus:
            for lst, key in ((sm, "sm_mhz"), (temp, "temp_c"), (util, "util_pct")):
                if (v := _f(g.get(key))) is not None:
                    lst.append(v)
            mask = g.get("clock_event_reasons")
            if isinstance(mask, str) and mask.lower().startswith("0x"):
                try:
                    masks |= int(mask, 16)
                except ValueError:
                    pass
        srv = d.get("server") if isinstance(d.get("server"), dict) else {}
        for lst, key in ((run_, "running"), (wait, "waiting"), (kv, "kv_cache_usage"), (pre, "preemptions")):
            if (v := _f(srv.get(key))) is not None:
                lst.append(v)
        if (v := _f(srv.get("running"))) is not None:
            point["running"] = v
        tok = _f(srv.get("generation_tokens"))
        if tok is not None and prev_tokens is not None and point["t"] and prev_tokens[0] and point["t"] > prev_tokens[0]:
            point["tokens_s"] = (tok - prev_tokens[1]) / (point["t"] - prev_tokens[0])
        if tok is not None:
            prev_tokens = (point["t"], tok)
        t.series.append(point)
    mean = lambda xs: statistics.fmean(xs) if xs else math.nan  # noqa: E731
    t.power_w, t.sm_mhz, t.util_pct = mean(power), mean(sm), mean(util)
    t.temp_max_c = max(temp) if temp else math.nan
    t.running_max, t.waiting_max = (max(run_) if run_ else math.nan), (max(wait) if wait else math.nan)
    t.kv_usage_max = max(kv) if kv else math.nan
    t.preemptions = pre[-1] - pre[0] if len(pre) > 1 else math.nan
    t.throttle = [name for bit, name in THROTTLE.items() if masks & bit]
    if t.samples and not t.gpu_samples and not t.problems:
        t.problems.append("no GPU power in the samples")
    return t


def of_run(run: Run) -> RunTelemetry | None:
    return read_run(run.path.with_name(layout.telemetry_file(run.path.name)))


def telemetry_table(camp: Campaign) -> pd.DataFrame | None:
    """One row per run with telemetry (None when no run has a telemetry file)."""
    rows = []
    for r in sorted(camp.runs, key=lambda r: (r.conc, r.cell, r.config, r.host, r.repeat or 0)):
        t = of_run(r)
        if t is None:
            continue
        tokens = r.result.total_output_tokens
        jpt = t.power_w * r.result.duration / tokens if t.recorded and tokens else math.nan
        rows.append({"concurrency": r.conc, "cell": r.cell, "config": r.config, "node": r.host,
                     "repeat": r.repeat or 1, "samples": t.samples, "power_w": t.power_w, "j_per_token": jpt,
                     "sm_mhz": t.sm_mhz, "temp_max_c": t.temp_max_c, "util_pct": t.util_pct,
                     "throttle": ", ".join(t.throttle) if t.recorded else NOT_RECORDED,
                     "running_max": t.running_max, "waiting_max": t.waiting_max, "kv_usage_max": t.kv_usage_max,
                     "preemptions": t.preemptions,
                     "note": "; ".join(t.problems) or ("" if t.recorded else NOT_RECORDED)})
    return pd.DataFrame(rows) if rows else None


TELEMETRY_HEADERS = ["config", "conc", "cell", "node", "run", "samples", "mean power W", "J / output token",
                     "SM MHz", "max temp C", "GPU util %", "throttle", "max running", "max waiting",
                     "max KV usage", "preemptions", "note"]


def telemetry_rows(df: pd.DataFrame) -> list[list[str]]:
    from .document import fmt
    # r["repeat"], not r.repeat: on a pandas row that is the Series.repeat method
    return [[r.config, str(r.concurrency), r.cell, r.node, str(r["repeat"]), str(r.samples), fmt(r.power_w, 1),
             fmt(r.j_per_token, 3), fmt(r.sm_mhz, 0), fmt(r.temp_max_c, 0), fmt(r.util_pct, 0),
             r.throttle or "none", fmt(r.running_max, 0), fmt(r.waiting_max, 0), fmt(r.kv_usage_max, 2),
             fmt(r.preemptions, 0), r.note] for _, r in df.iterrows()]


def node_differences(df: pd.DataFrame, baseline: str, concurrency: int | None) -> list[str]:
    """When the gate fails: per node the baseline's telemetry at the rule's concurrency, side by side."""
    if df is None:
        return ["telemetry: not recorded on any node (no telemetry files)"]
    at = df[(df.config == baseline) & ((df.concurrency == concurrency) if concurrency is not None else True)]
    if at.empty:
        return [f"telemetry: no '{baseline}' run with telemetry at concurrency {concurrency}"]
    out = []
    for node, g in at.groupby("node"):
        if g.power_w.isna().all():
            out.append(f"telemetry {node}: {NOT_RECORDED} ({'; '.join(sorted(set(g.note)))})")
            continue
        thr = sorted({x for v in g.throttle for x in str(v).split(", ") if x and x != NOT_RECORDED})
        out.append(f"telemetry {node} ({baseline}, conc {concurrency}): mean power {g.power_w.mean():.1f} W, "
                   f"SM clock {g.sm_mhz.mean():.0f} MHz, max temperature {g.temp_max_c.max():.0f} C, "
                   f"{g.j_per_token.mean():.3f} J/token, throttle: {', '.join(thr) or 'none'}")
    return out


def timeline_svg(camp: Campaign, simulated: bool) -> str | None:
    """Requests in flight, tokens/s and power over time, one line per run of the highest concurrency."""
    runs = [(r, t) for r in camp.runs if (t := of_run(r)) is not None and t.series]
    if not runs:
        return None
    top = max(r.conc for r, _ in runs)
    runs = [(r, t) for r, t in runs if r.conc == top][:8]
    from .plots import RC, _svg, plt
    with plt.rc_context(RC):
        fig, axes = plt.subplots(3, 1, figsize=(7, 6), sharex=True)
        for r, t in runs:
            t0 = next((p["t"] for p in t.series if p.get("t")), 0)
            label = f"{r.config} ({r.host})" + (f" r{r.repeat}" if r.repeat else "")
            for ax, key in zip(axes, ("running", "tokens_s", "power_w")):
                pts = [(p["t"] - t0, p[key]) for p in t.series if p.get("t") and key in p]
                if pts:
                    ax.plot(*zip(*pts), lw=0.9, label=label)
        for ax, lab in zip(axes, ("requests in flight", "generated tokens/s", "GPU power W")):
            ax.set_ylabel(lab)
        axes[-1].set_xlabel("seconds since the run's first sample")
        axes[0].set_title(f"Telemetry at concurrency {top}")
        axes[0].legend(fontsize=6, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        return _svg(fig, simulated)
