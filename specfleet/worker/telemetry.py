"""GPU and server telemetry during a bench run, sampled on the worker into
`<result>.telemetry.jsonl` (layout.telemetry_file): what is recorded, the file's lines and the
drivers' field names are in docs/telemetry.md. Stdlib only: part of the worker program (runner.pyz).

Power has its own stream: nvidia-smi's own loop (`--loop-ms`, FAST_PERIOD_MS) writes `power` lines
(instantaneous power where the driver knows it), each stamped with the monotonic clock that vLLM's
per-request `start_times` use (time.perf_counter), so the report can integrate over the measured
window alone.

Nothing here fails a run: a command that cannot run, a field a driver does not know, a server
without /metrics is recorded in the header (or as "errors" of a sample) and the value is left out,
which the report shows as "not recorded".
"""
from __future__ import annotations

import json
import os
import pty
import subprocess
import threading
import time
import urllib.request
from contextlib import suppress

from .host import smi_row
from .runspec import RunSpec

GPU_FIELDS = {"index": "index", "power.draw": "power_w", "clocks.sm": "sm_mhz", "clocks.mem": "mem_mhz",
              "temperature.gpu": "temp_c", "utilization.gpu": "util_pct"}
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")  # newer, older drivers
SERVER_METRICS = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
                  "vllm:kv_cache_usage_perc": "kv_cache_usage", "vllm:gpu_cache_usage_perc": "kv_cache_usage",
                  "vllm:num_preemptions_total": "preemptions", "vllm:generation_tokens_total": "generation_tokens",
                  "vllm:request_success_total": "requests_finished"}
# power.draw: a 1 s average, lags ~0.5 s; no energy counter: nvidia-smi 580 has none (docs/telemetry.md)
FAST_FIELDS = {"power.draw.instant": "power_instant_w"}
FAST_PERIOD_MS = 25  # stamps each ~100 ms reading within 25 ms (the report counts distinct readings)
DEFAULT_PERIOD_S = 1.0
SMI_TIMEOUT_S = 5.0


def _num(v: str) -> float | int | str | None:
    v = v.strip()
    if not v or v.startswith("[") or v.upper() == "N/A":
        return None
    if v.lower().startswith("0x"):
        return v  # a bit mask stays as nvidia-smi prints it
    try:
        f = float(v)
    except ValueError:
        return None
    return int(f) if f.is_integer() else f


def parse_smi(text: str, names: list[str]) -> list[dict]:
    """`--format=csv,noheader,nounits` lines (host.smi_row) into one dict per GPU under the sampler's
    names; a line that does not fit the query is left out."""
    out = []
    for row in filter(None, (smi_row(line, names) for line in text.splitlines())):
        out.append({{**GPU_FIELDS, **FAST_FIELDS}.get(n, "clock_event_reasons" if n in REASON_FIELDS else n): v
                    for n, c in row.items() if (v := _num(c)) is not None})
    return out


def parse_metrics(text: str) -> dict:
    """The SERVER_METRICS found in Prometheus text, summed over label sets (data-parallel engines)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name not in SERVER_METRICS:
            continue
        try:
            val = float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        key = SERVER_METRICS[name]
        out[key] = out.get(key, 0.0) + val
    return out


class Sampler:
    """Samples every `period_s` in a daemon thread into `path` (JSON lines), from start() to stop()."""

    def __init__(self, path: str, gpus: list[int] | None, metrics_url: str | None,
                 period_s: float = DEFAULT_PERIOD_S, smi: str = "nvidia-smi", env: dict | None = None,
                 off: bool = False, on_server=None, fast_ms: int = FAST_PERIOD_MS):
        self.path, self.gpus, self.url, self.period = path, gpus, metrics_url, max(0.1, float(period_s))
        self.off, self.smi, self.env, self.on_server = off, smi, env, on_server  # on_server(each sample's metrics)
        self.fast_ms = max(0, int(fast_ms))
        self.names, self.fast_names = list(GPU_FIELDS), ["index", "power.draw"]
        self._lock, self._proc, self._fast = threading.Lock(), None, None
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fh = None

    # ---------------------------------------------------------------- one sample
    def _argv(self, names: list[str]) -> list[str]:
        ids = [f"--id={','.join(str(g) for g in self.gpus)}"] if self.gpus else []
        return [self.smi, f"--query-gpu={','.join(names)}", "--format=csv,noheader,nounits", *ids]

    def _smi(self, names: list[str]) -> tuple[list[dict] | None, str | None]:
        argv = self._argv(names)
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, env=self.env)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, f"{self.smi}: {e}"
        if p.returncode != 0:
            return None, f"{self.smi} exit {p.returncode}: {(p.stdout + p.stderr).strip()[:200]}"
        return parse_smi(p.stdout, names), None

    def _probe(self) -> None:
        """Which clock-event field this driver knows (the first of REASON_FIELDS that answers)."""
        rows, err = self._smi(self.names)
        if rows is None:
            self.problems.append(f"GPU telemetry not recorded: {err}")
            self.names, self.fast_ms = [], 0
            return
        self.fast_names += [f for f in FAST_FIELDS if self._smi(["index", f])[0] is not None]
        if "power.draw.instant" not in self.fast_names:
            self.problems.append("instantaneous power not recorded: nvidia-smi does not know power.draw.instant "
                                 "(the power stream carries power.draw, a 1 s average that lags ~0.5 s)")
        for f in REASON_FIELDS:
            if self._smi(["index", f])[0] is not None:
                self.names.append(f)
                return
        self.problems.append("clock-event reasons not recorded: the driver knows neither "
                             + " nor ".join(REASON_FIELDS))

    def sample(self) -> dict:
        s: dict = {"kind": "sample", "t": round(time.time(), 3), "mono": round(time.monotonic(), 4)}
        errors = []
        if self.names:
            rows, err = self._smi(self.names)
            if rows is None:
                errors.append(err)
            else:
                s["gpus"] = rows
        if self.url:
            try:
                with urllib.request.urlopen(self.url, timeout=2.0) as r:  # noqa: S310 (the run's own server)
                    s["server"] = parse_metrics(r.read().decode("utf-8", "replace"))
            except Exception as e:  # noqa: BLE001 (any failure: not recorded, never a failed run)
                errors.append(f"{self.url}: {type(e).__name__}: {e}"[:200])
        if errors:
            s["errors"] = errors
        return s

    # ---------------------------------------------------------------- the thread
    def _write(self, obj: dict) -> None:
        try:
            with self._lock:  # two threads write: the 1 s samples and the power stream
                self._fh.write(json.dumps(obj, sort_keys=True) + "\n")
                self._fh.flush()
        except (OSError, ValueError, AttributeError):
            pass

    def _power_loop(self, master: int) -> None:
        """nvidia-smi's `--loop-ms` rows, read from a pty (its output line-buffered: a row is read when
        printed) and stamped when read: one `power` line per read."""
        buf = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: nvidia-smi ended
                break
            if not chunk:
                break
            t, mono = round(time.time(), 3), round(time.monotonic(), 4)
            *rows, buf = (buf + chunk).split(b"\n")
            got = parse_smi(b"\n".join(rows).decode("utf-8", "replace"), self.fast_names)
            if got:
                self._write({"kind": "power", "t": t, "mono": mono, "gpus": got})
        os.close(master)

    def _start_power(self) -> None:
        if not self.fast_ms:
            return
        try:
            master, slave = pty.openpty()
        except OSError as e:  # no pseudo-terminal in this container: no power stream, the run goes on
            self._write({"kind": "problem", "t": round(time.time(), 3), "problem": f"power stream not recorded: {e}"})
            return
        try:
            self._proc = subprocess.Popen(self._argv(self.fast_names) + [f"--loop-ms={self.fast_ms}"], stdout=slave,
                                          stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=self.env)
        except OSError as e:
            os.close(master)
            self._write({"kind": "problem", "t": round(time.time(), 3), "problem": f"power stream not recorded: {e}"})
            return
        finally:
            os.close(slave)
        self._fast = threading.Thread(target=self._power_loop, args=(master,), name="telemetry-power", daemon=True)
        self._fast.start()

    def _loop(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            self._write(s := self.sample())
            with suppress(Exception):  # the runner's request count: a display, never the run's failure
                self.on_server and "server" in s and self.on_server(s["server"])
            nxt += self.period
            self._stop.wait(max(0.0, nxt - time.monotonic()))

    def start(self) -> "Sampler":
        if self.off:
            return self
        try:
            self._fh = open(self.path, "w", encoding="utf-8")
        except OSError:
            return self  # no file, no telemetry: the run goes on
        self._probe()
        self._write({"kind": "header", "period_s": self.period, "gpus": self.gpus, "query": self.names,
                     "power_query": self.fast_names if self.fast_ms else [], "power_period_ms": self.fast_ms,
                     "metrics_url": self.url, "problems": self.problems, "t": round(time.time(), 3),
                     "mono": round(time.monotonic(), 4)})
        self._start_power()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=SMI_TIMEOUT_S + 3)
        if self._proc is not None:
            self._proc.terminate()
            with suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=SMI_TIMEOUT_S)
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
        if self._fast is not None:
            self._fast.join(timeout=SMI_TIMEOUT_S)
        if self._fh is not None:
            self._write({"kind": "end", "t": round(time.time(), 3), "mono": round(time.monotonic(), 4)})
            with suppress(OSError):
                self._fh.close()
            self._fh = None


def sampler_for(spec: RunSpec, port: int, path: str, env: dict | None, gpus: list[int] | None,
                on_server=None) -> Sampler:
    """The runner's one call: the sampler of one bench run into `path` of the server at
    spec.server_host:`port` (the spec's telemetry_period_s, telemetry_power_ms: None their defaults
    here, 0 turns either off: a Sampler that records nothing, no power stream), calling on_server(metrics)."""
    url = f"http://{spec.server_host}:{port}/metrics"
    period = DEFAULT_PERIOD_S if spec.telemetry_period_s is None else spec.telemetry_period_s
    fast_ms = FAST_PERIOD_MS if spec.telemetry_power_ms is None else spec.telemetry_power_ms
    env = {k: v for k, v in (env or os.environ).items() if k != "CUDA_VISIBLE_DEVICES"}  # --id picks them
    return Sampler(path, gpus, url, float(period or DEFAULT_PERIOD_S), env=env, off=not period, on_server=on_server,
                   fast_ms=fast_ms)
