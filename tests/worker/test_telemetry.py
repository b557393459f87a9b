"""The worker's telemetry sampler against the testbed's GPU stand-in and a /metrics endpoint, and what a
worker without nvidia-smi or /metrics records (nothing fails)."""
from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from dataclasses import replace
from pathlib import Path

import pytest

from specfleet.campaign import Paths, build_run_spec, load_plan
from specfleet.worker.telemetry import Sampler, parse_metrics, parse_smi, sampler_for

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "testbed" / "host" / "gpu-standin"
METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
vllm:num_requests_running{engine="0",model_name="bench"} 7.0
vllm:num_requests_running{engine="1",model_name="bench"} 1.0
vllm:num_requests_waiting{engine="0",model_name="bench"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="bench"} 0.25
vllm:generation_tokens_total{engine="0",model_name="bench"} 1234.0
vllm:generation_tokens_created{engine="0",model_name="bench"} 1700000000.0
"""


@pytest.fixture
def gpu2(tmp_path) -> Path:
    sys.path.insert(0, str(REPO))
    from testbed.seed import gpu_json
    d = tmp_path / "gpu"
    (d / "reservations").mkdir(parents=True)
    (d / "gpu.json").write_text(json.dumps(gpu_json("w1", 2)))
    (d / "modules").write_text("nvidia\n")
    shutil.copyfile(STANDIN, d / "nvidia-smi")
    (d / "nvidia-smi").chmod(0o755)
    (d / "reservations" / str(os.getpid())).write_text("1:90000")  # this process "holds" GPU 1
    return d


@pytest.fixture
def metrics_url():
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            body = METRICS.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    srv.shutdown()


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_samples_the_servers_gpus_and_metrics(tmp_path, gpu2, metrics_url):
    out = tmp_path / "vanilla_conc8.telemetry.jsonl"
    env = {**os.environ, "SIMVLLM_GPU_DIR": str(gpu2)}
    sampler = Sampler(str(out), [1], metrics_url, period_s=0.1, smi=str(gpu2 / "nvidia-smi"), env=env).start()
    # 3 samples take ~0.3 s idle; each is an nvidia-smi stand-in start (~65 ms of CPU), which at load
    # 20-30 on 2 cores took over 0.45 s for 3: wait for them, up to a bound far above either
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and sum('"kind": "sample"' in x for x in out.read_text().splitlines()) < 3:
        time.sleep(0.05)
    sampler.stop()
    got = lines(out)
    head, samples, end = got[0], [g for g in got if g["kind"] == "sample"], got[-1]
    assert head["kind"] == "header" and head["problems"] == [] and "clocks_event_reasons.active" in head["query"]
    assert end["kind"] == "end" and len(samples) >= 3
    s = samples[0]
    assert s["gpus"] == [{"index": 1, "power_w": 300, "sm_mhz": 1980, "mem_mhz": 2619, "temp_c": 34,
                          "util_pct": 97, "clock_event_reasons": "0x0000000000000000"}]
    assert s["server"] == {"running": 8.0, "waiting": 2.0, "kv_cache_usage": 0.25, "generation_tokens": 1234.0}
    assert [t["t"] for t in samples] == sorted(t["t"] for t in samples)


def test_nothing_readable_is_recorded_as_such(tmp_path):
    out = tmp_path / "t.jsonl"
    sampler = Sampler(str(out), [0], "http://127.0.0.1:9/metrics", period_s=0.1, smi=str(tmp_path / "no-smi")).start()
    time.sleep(0.25)
    sampler.stop()
    got = lines(out)
    assert got[0]["problems"][0].startswith("GPU telemetry not recorded:") and got[0]["query"] == []
    samples = [g for g in got if g["kind"] == "sample"]
    assert samples and all("gpus" not in s and "server" not in s and s["errors"] for s in samples)


def test_older_driver_field_and_period_zero(tmp_path, gpu2):
    # a driver that knows neither clock-event field: the rest is sampled, the reason is said
    text = "0, 61.5, 345, 405, 30, 0\n"
    assert parse_smi(text, ["index", "power.draw", "clocks.sm", "clocks.mem", "temperature.gpu", "utilization.gpu"]) \
        == [{"index": 0, "power_w": 61.5, "sm_mhz": 345, "mem_mhz": 405, "temp_c": 30, "util_pct": 0}]
    assert parse_smi("0, [N/A]\n", ["index", "power.draw"]) == [{"index": 0}]
    assert parse_metrics(METRICS)["running"] == 8.0
    spec = build_run_spec(load_plan("plans/demo.yml"), "w1", ["vanilla"], Paths(venv="/v", work_dir="/w"), run_id="r")
    off = sampler_for(replace(spec, telemetry_period_s=0), 8000, str(tmp_path / "off.jsonl"), {}, None).start()
    off.stop()
    assert not (tmp_path / "off.jsonl").exists()


def test_parses_what_a_real_h200_prints():
    """The sampler's query as nvidia-smi 580.159.04 on an idle NVIDIA H200 answered it (the lent device)."""
    names = ["index", "power.draw", "clocks.sm", "clocks.mem", "temperature.gpu", "utilization.gpu",
             "clocks_event_reasons.active"]
    assert parse_smi("0, 78.24, 345, 3201, 36, 0, 0x0000000000000001\n", names) == [
        {"index": 0, "power_w": 78.24, "sm_mhz": 345, "mem_mhz": 3201, "temp_c": 36, "util_pct": 0,
         "clock_event_reasons": "0x0000000000000001"}]


def test_power_stream_is_fast_and_on_the_monotonic_clock(tmp_path, gpu2):
    """nvidia-smi's own loop (--loop-ms) feeds `power` lines with instantaneous power, stamped with
    time.monotonic(), the clock of vLLM's per-request start_times (perf_counter). It asks for no energy
    counter: nvidia-smi 580 has none ("total_energy_consumption" is not a valid field on a real H100,
    tests/fixtures/h100-power), and the stand-in refuses it as that one does."""
    out = tmp_path / "vanilla_conc16.telemetry.jsonl"
    env = {**os.environ, "SIMVLLM_GPU_DIR": str(gpu2)}
    sampler = Sampler(str(out), [1], None, period_s=1.0, smi=str(gpu2 / "nvidia-smi"), env=env).start()
    a = time.monotonic()
    deadline = a + 20
    while time.monotonic() < deadline and sum('"kind": "power"' in x for x in out.read_text().splitlines()) < 12:
        time.sleep(0.05)
    sampler.stop()
    got = lines(out)
    head, power = got[0], [g for g in got if g["kind"] == "power"]
    assert head["power_query"] == ["index", "power.draw", "power.draw.instant"] and head["problems"] == []
    assert head["power_period_ms"] == 25 and "mono" in head and "mono" in got[-1]
    assert len(power) >= 12 and all(p["gpus"][0]["index"] == 1 and 300 <= p["gpus"][0]["power_instant_w"] < 301
                                    and "energy_mj" not in p["gpus"][0] for p in power)
    monos = [p["mono"] for p in power]
    assert monos == sorted(monos) and a - 5 < monos[0] < time.monotonic()
    # the nvidia-smi loop ended with the sampler (no process left behind)
    assert sampler._proc.poll() is not None


def test_a_driver_without_instantaneous_power_is_named(tmp_path, gpu2):
    """A driver whose nvidia-smi refuses power.draw.instant: the power stream carries power.draw, and the
    header says that it is a 1 s average that lags."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncase \"$*\" in *power.draw.instant*) "
                   "echo 'Field \"power.draw.instant\" is not a valid field to query.'; exit 2;; esac\n"
                   f"exec {gpu2 / 'nvidia-smi'} \"$@\"\n")
    smi.chmod(0o755)
    out = tmp_path / "t.jsonl"
    env = {**os.environ, "SIMVLLM_GPU_DIR": str(gpu2)}
    sampler = Sampler(str(out), [1], None, period_s=1.0, smi=str(smi), env=env).start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and sum('"kind": "power"' in x for x in out.read_text().splitlines()) < 3:
        time.sleep(0.05)
    sampler.stop()
    got = lines(out)
    assert got[0]["power_query"] == ["index", "power.draw"]
    assert got[0]["problems"] == ["instantaneous power not recorded: nvidia-smi does not know power.draw.instant "
                                  "(the power stream carries power.draw, a 1 s average that lags ~0.5 s)"]
    assert [g for g in got if g["kind"] == "power"][0]["gpus"][0] == {"index": 1, "power_w": 300}


def test_no_pseudo_terminal_no_power_stream_and_the_run_goes_on(tmp_path, gpu2, monkeypatch):
    import pty

    def none():
        raise OSError("out of pty devices")
    monkeypatch.setattr(pty, "openpty", none)
    out = tmp_path / "t.jsonl"
    env = {**os.environ, "SIMVLLM_GPU_DIR": str(gpu2)}
    sampler = Sampler(str(out), [1], None, period_s=0.1, smi=str(gpu2 / "nvidia-smi"), env=env).start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and sum('"kind": "sample"' in x for x in out.read_text().splitlines()) < 2:
        time.sleep(0.05)
    sampler.stop()
    got = lines(out)
    assert [g["problem"] for g in got if g["kind"] == "problem"] == ["power stream not recorded: out of pty devices"]
    assert sum(g["kind"] == "sample" for g in got) >= 2 and not any(g["kind"] == "power" for g in got)


def finished(n_stop: float, n_length: float) -> str:
    """vLLM's finished-request counter, one label set per finished_reason (summed by parse_metrics)."""
    return (f'vllm:request_success_total{{engine="0",finished_reason="stop",model_name="bench"}} {n_stop}\n'
            f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="bench"}} {n_length}\n')


def test_the_runner_counts_a_runs_finished_requests_from_its_servers_metrics():
    """fab bench's `requests 34/80`: the server's finished requests since the run's first sample, less the
    client's warm-ups, at most the run's prompts; written into the item's state only when it changes."""
    from types import SimpleNamespace
    from specfleet.worker.lane import Lane
    from specfleet.worker.runspec import ItemState
    written = []
    owner = SimpleNamespace(set=lambda rec, **kw: (setattr(rec, "requests", kw["requests"]),
                                                   written.append(kw["requests"])))
    rec = ItemState.new("vanilla", None)
    on_server = Lane.requests_counter(SimpleNamespace(owner=owner), rec, SimpleNamespace(num_warmups=1),
                                      SimpleNamespace(prompts=lambda: 80))
    for text in (finished(4, 6), finished(4, 6), finished(5, 6), finished(30, 20), finished(150, 50), METRICS):
        on_server(parse_metrics(text))   # the last: a server without the counter changes nothing
    assert written == [{"done": 0, "of": 80}, {"done": 39, "of": 80}, {"done": 80, "of": 80}]
    assert rec.requests == {"done": 80, "of": 80}
