"""Telemetry of each run (the worker's `<result>.telemetry.jsonl`, specfleet/worker/telemetry.py) in the
report: the table per run, a timeline plot, and, when the gate fails, how the nodes' telemetry differs
(docs/telemetry.md: the columns). The samples span the whole `vllm bench serve` process (client
start-up and warm-ups included); energy per token integrates power over the measured window alone
(`window_energy`: the requests' own start and end times), with the idle power before the run beside
it. A run whose file has no GPU samples is "not recorded"; a bad line is skipped.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ... import untrusted_json
from ...worker import layout
from ..scan.folder import CollectedFolder, Run

NOT_RECORDED = "not recorded"
# nvidia-smi clock-event reasons (nvml.h, nvmlClocksEventReason*): the ones that slow a GPU down
THROTTLE = {0x4: "SW power cap", 0x8: "HW slowdown", 0x20: "sync boost", 0x40: "SW thermal",
            0x80: "HW thermal", 0x100: "HW power brake"}
TIMELINE_IMAGE = "telemetry-timeline.svg"
MIN_WINDOW_SAMPLES = 10  # fewer power readings inside the measured window: its energy is not measurable
IDLE_MIN_SAMPLES = 3
# power.draw is a 1 s average on Ampere and newer: the first second of a file still shows the run before
IDLE_SKIP_S = 1.0
NOT_MEASURABLE = "not measurable"
POWER_STREAM = "power stream"  # the sampler's `power` lines (telemetry.py), as against its 1 s samples


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
    # per GPU index: (t, mono or None, power W, energy counter J or None), the fast `power` stream when the
    # file has one, else the 1 s samples (telemetry.py); end_t: the sampler's end (wall clock)
    power: dict[int, list[tuple]] = field(default_factory=dict)
    power_source: str = ""
    end_t: float | None = None

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
    fast: dict[int, list[tuple]] = {}
    slow: dict[int, list[tuple]] = {}
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
        if d.get("kind") == "end":
            t.end_t = _f(d.get("t"))
        if d.get("kind") == "problem":  # the sampler's word on what it could not record (the power stream)
            t.problems.append(str(d.get("problem")))
        if d.get("kind") == "power":
            _add_power(fast, d)
        if d.get("kind") != "sample":
            continue
        t.samples += 1
        point = {"t": _f(d.get("t"))}
        _add_power(slow, d)
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
    t.power, t.power_source = (fast, POWER_STREAM) if fast else (slow, "1 s samples")
    return t


def _add_power(into: dict[int, list[tuple]], d: dict) -> None:
    """One line's GPU readings into per-GPU series: instantaneous power where the driver gave it."""
    for g in d.get("gpus") or []:
        if not isinstance(g, dict) or not isinstance(g.get("index"), int) or _f(d.get("t")) is None:
            continue
        w = _f(g.get("power_instant_w"))
        w = _f(g.get("power_w")) if w is None else w
        mj = _f(g.get("energy_mj"))
        if w is not None or mj is not None:
            into.setdefault(g["index"], []).append((_f(d["t"]), _f(d.get("mono")), w, None if mj is None else mj / 1000))


@dataclass
class Energy:
    """Energy of one run's measured window: total and above idle (J), the idle power (W) before it."""
    joules: float = math.nan
    idle_w: float = math.nan
    window_s: float = math.nan
    samples: int = 0
    method: str = ""
    why: str = ""          # set: the energy is not measurable, for this reason
    idle_why: str = ""

    @property
    def above_idle_j(self) -> float:
        return self.joules - self.idle_w * self.window_s


def request_window(res) -> tuple[float, float] | str:
    """The measured window on the client's monotonic clock (vLLM's time.perf_counter): the first request's
    start to the last one's end (start + latency, else start + TTFT + its inter-token gaps); a reason
    when the result lacks the per-request times."""
    starts = res.start_times
    if not starts:
        return "the result has no per-request start times (vLLM's start_times: --save-detailed, vLLM >= 0.15)"
    if res.latencies and len(res.latencies) == len(starts):
        ends = [s + la for s, la in zip(starts, res.latencies)]
    elif res.ttfts and res.itls and len(res.ttfts) == len(res.itls) == len(starts):
        ends = [s + tt + sum(gaps) for s, tt, gaps in zip(starts, res.ttfts, res.itls)]
    else:
        return "the result has no per-request end times (latencies, or ttfts with itls)"
    return min(starts), max(ends)


def _at(pts: list[tuple[float, float]], x: float) -> float:
    """Linear interpolation in (time, value) points sorted by time; x inside their span."""
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    raise ValueError(x)


def _integral(pts: list[tuple[float, float]], a: float, b: float) -> float:
    """Trapezoid of (time, W) points over [a, b], the values at a and b interpolated."""
    inner = [(a, _at(pts, a))] + [p for p in pts if a < p[0] < b] + [(b, _at(pts, b))]
    return sum((x1 - x0) * (y0 + y1) / 2 for (x0, y0), (x1, y1) in zip(inner, inner[1:]))


def _held(pts: list[tuple[float, float]], a: float, b: float) -> list[tuple[float, float]]:
    """Power readings with a window edge that lies within one reading interval beyond the first or last
    reading held at that reading's value (the sampler stops when the client exits, which can fall
    between two 1 s samples)."""
    step = statistics.median(x1 - x0 for (x0, _), (x1, _) in zip(pts, pts[1:]))
    head = [(a, pts[0][1])] if pts[0][0] - step <= a < pts[0][0] else []
    tail = [(b, pts[-1][1])] if pts[-1][0] < b <= pts[-1][0] + step else []
    return head + pts + tail


def _readings(pts: list[tuple], clock: int, a: float, b: float, stream: bool) -> int:
    """The power readings inside (a, b). In the power stream a row that repeats the row before it is the
    driver's last reading printed again, not a new one: an H100's driver (580) refreshes
    power.draw.instant every ~100 ms, so nvidia-smi's 25 ms loop prints each reading about four times
    (docs/telemetry.md). Each 1 s sample is a reading of its own."""
    fresh = [p for i, p in enumerate(pts) if not stream or i == 0 or p[2:] != pts[i - 1][2:]]
    return sum(a < p[clock] < b for p in fresh)


def window_energy(tel: RunTelemetry, res) -> Energy:
    """The GPUs' energy over the run's measured window (summed over the run's GPUs): the driver's
    energy counter where every reading has it (its difference across the window, interpolated at the
    edges), else the trapezoid of power. The window is placed on the telemetry's monotonic stamps; a
    file written before they existed places it ending at the sampler's end line (the client had exited
    by then: up to ~0.5 s late, stated). Idle: the median power before the first request (client
    start-up), its first IDLE_SKIP_S left out. An edge within one interval beyond the power readings takes
    the nearest reading (`_held`). Fewer than MIN_WINDOW_SAMPLES distinct readings inside the
    window (`_readings`): not measurable, with the reason."""
    e = Energy()
    w = request_window(res)
    if isinstance(w, str):
        e.why = w
        return e
    a, b = w
    e.window_s = b - a
    if not tel.power:
        e.why = "no GPU power in the telemetry"
        return e
    mono = all(p[1] is not None for pts in tel.power.values() for p in pts)
    place = "monotonic clock"
    if not mono:
        if tel.end_t is None:
            e.why = "the telemetry has neither monotonic stamps nor an end line to place the window by"
            return e
        a, b, place = tel.end_t - e.window_s, tel.end_t, "window placed by the sampler's end line (telemetry " \
            "without monotonic stamps: up to ~0.5 s late)"
    clock = 1 if mono else 0
    total, counted, idles, counters = 0.0, [], [], True
    for pts in tel.power.values():
        watts = [(p[clock], p[2]) for p in pts if p[2] is not None]
        joules = [(p[clock], p[3]) for p in pts if p[3] is not None]
        counters &= len(joules) == len(pts)
        if not counters and len(watts) > 1:
            watts = _held(watts, a, b)
        series = joules if counters else watts
        if not series or series[0][0] > a or series[-1][0] < b:
            e.why = f"the telemetry ({tel.power_source}) does not cover the measured window"
            return e
        counted.append(_readings(pts, clock, a, b, tel.power_source == POWER_STREAM))
        total += _at(joules, b) - _at(joules, a) if counters else _integral(watts, a, b)
        before = [v for x, v in watts if watts[0][0] + IDLE_SKIP_S <= x < a]
        idles.append(statistics.median(before) if len(before) >= IDLE_MIN_SAMPLES else math.nan)
    e.samples = min(counted)
    e.method = ("the driver's energy counter" if counters else f"trapezoid of power ({tel.power_source})") + f", {place}"
    if e.samples < MIN_WINDOW_SAMPLES:
        e.why = (f"{e.samples} power readings in the {e.window_s:.2f} s measured window "
                 f"(at least {MIN_WINDOW_SAMPLES} needed; {tel.power_source})")
        return e
    e.joules = total
    e.idle_w = sum(idles)
    if math.isnan(e.idle_w):
        e.idle_why = f"idle not measured: fewer than {IDLE_MIN_SAMPLES} readings before the first request"
    return e


def of_run(run: Run) -> RunTelemetry | None:
    return read_run(run.path.with_name(layout.telemetry_file(run.path.name)))


def telemetry_table(camp: CollectedFolder) -> pd.DataFrame | None:
    """One row per run with telemetry (None when no run has a telemetry file)."""
    rows = []
    for r in sorted(camp.runs, key=lambda r: (r.conc, r.cell, r.config, r.host, r.repeat or 0)):
        t = of_run(r)
        if t is None:
            continue
        tokens = r.result.total_output_tokens
        e = window_energy(t, r.result) if t.recorded else Energy(why=NOT_RECORDED)
        if not tokens and not e.why:
            e.why = "no output tokens"
        jpt = e.joules / tokens if not e.why else math.nan
        above = e.above_idle_j / tokens if not e.why else math.nan
        notes = [*t.problems, *([f"energy {NOT_MEASURABLE}: {e.why}"] if e.why and t.recorded else []),
                 *([e.idle_why] if e.idle_why and not e.why else []),
                 *([f"energy: {e.method}"] if not e.why and "end line" in e.method else [])]
        rows.append({"concurrency": r.conc, "cell": r.cell, "config": r.config, "node": r.host,
                     "repeat": r.repeat or 1, "samples": t.samples, "power_w": t.power_w, "idle_w": e.idle_w,
                     "j_per_token": jpt, "j_per_token_above_idle": above, "energy_samples": e.samples,
                     "energy_method": e.method,
                     "sm_mhz": t.sm_mhz, "temp_max_c": t.temp_max_c, "util_pct": t.util_pct,
                     "throttle": ", ".join(t.throttle) if t.recorded else NOT_RECORDED,
                     "running_max": t.running_max, "waiting_max": t.waiting_max, "kv_usage_max": t.kv_usage_max,
                     "preemptions": t.preemptions,
                     "note": "; ".join(notes) or ("" if t.recorded else NOT_RECORDED)})
    return pd.DataFrame(rows) if rows else None


TELEMETRY_HEADERS = ["config", "conc", "cell", "node", "run", "samples", "mean power W", "idle W",
                     "J / output token", "above idle J / token", "readings in window", "SM MHz", "max temp C", "GPU util %", "throttle", "max running", "max waiting",
                     "max KV usage", "preemptions", "note"]


def telemetry_rows(df: pd.DataFrame, fmt) -> list[list[str]]:
    """The table's cells; `fmt` is the report's number format (document.fmt: passed in, since the
    document imports the export, which reads the telemetry's request windows)."""
    # r["repeat"], not r.repeat: on a pandas row that is the Series.repeat method
    energy = lambda v: NOT_MEASURABLE if math.isnan(v) else fmt(v, 3)  # noqa: E731 (the reason: the note)
    return [[r.config, str(r.concurrency), r.cell, r.node, str(r["repeat"]), str(r.samples), fmt(r.power_w, 1),
             fmt(r.idle_w, 1), energy(r.j_per_token), energy(r.j_per_token_above_idle), str(r.energy_samples),
             fmt(r.sm_mhz, 0), fmt(r.temp_max_c, 0), fmt(r.util_pct, 0),
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
        jpt = (f"{g.j_per_token.mean():.3f} J/token over the measured window (idle {g.idle_w.mean():.1f} W)"
               if g.j_per_token.notna().all() else f"energy per token {NOT_MEASURABLE} (the table's note says why)")
        out.append(f"telemetry {node} ({baseline}, conc {concurrency}): mean power {g.power_w.mean():.1f} W, "
                   f"SM clock {g.sm_mhz.mean():.0f} MHz, max temperature {g.temp_max_c.max():.0f} C, "
                   f"{jpt}, throttle: {', '.join(thr) or 'none'}")
    return out


def timeline_svg(camp: CollectedFolder, simulated: bool) -> str | None:
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
