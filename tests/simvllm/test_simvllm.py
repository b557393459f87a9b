"""The simulated vLLM, run as real processes from a venv (`pip install testbed/simvllm`)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from simvllm_helpers import FIXTURES, SIMVLLM, cmdline, kill_pid, pid_alive, run_bench

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 128}
EXTRA_KEYS = {"simulated", "engine", "engine_version", "simulated_time_scale"}


def vllm(venv, *args, **kw):
    return subprocess.run([str(venv / "bin" / "vllm"), *args], capture_output=True, text=True, timeout=30, **kw)


def load(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert "\n" not in text.strip(), "vLLM writes the result on one line"
    return json.loads(text)


def same_shape(got: dict, ref: dict) -> None:
    assert set(got) - EXTRA_KEYS == set(ref), (set(got) ^ set(ref)) - EXTRA_KEYS
    assert [k for k in got if k not in EXTRA_KEYS] == list(ref), "key order differs from vLLM 0.32.0"
    for k, v in ref.items():
        if v is None or k in ("request_rate",):
            continue
        assert type(got[k]) is type(v), (k, type(got[k]), type(v))
    assert got["simulated"] is True and got["engine"] == "specfleet-simvllm"
    assert got["engine_version"] == "simvllm 1.0 (simulated vLLM)"


# ------------------------------------------------------------------ CLI
def test_version_and_import(simvenv):
    # the simulated engine names itself and its own version, never a bare "0.32.0"
    assert vllm(simvenv, "--version").stdout.strip() == "simvllm 1.0 (simulated vLLM)"
    p = subprocess.run([str(simvenv / "bin" / "python"), "-c", "import vllm; print(vllm.__version__, vllm.SIMULATED)"],
                       capture_output=True, text=True, check=True)
    assert p.stdout.split() == ["0.32.0", "True"]


def test_unknown_flag_exits_2(simvenv, model_dir):
    p = vllm(simvenv, "serve", str(model_dir), "--disable-log-requests")
    assert p.returncode == 2
    assert "unrecognized arguments: --disable-log-requests" in p.stderr
    assert vllm(simvenv, "bench", "serve", "--no-such-flag").returncode == 2


@pytest.mark.parametrize("spec,needle", [
    ({"method": "ngram", "prompt_lookup_max": 4}, "num_speculative_tokens must be provided"),
    ({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 6, "prompt_lookup_max": 2},
     "prompt_lookup_min=6 must be <= prompt_lookup_max=2"),
    ({"method": "eagle3", "model": "/nonexistent/speculator", "num_speculative_tokens": 3},
     "Invalid repository ID or local directory"),
])
def test_speculative_config_validation(simvenv, model_dir, spec, needle):
    p = vllm(simvenv, "serve", str(model_dir), "--port", "18999", "--speculative-config", json.dumps(spec))
    assert p.returncode == 1 and needle in p.stderr, p.stderr


def test_model_without_config_json_fails(simvenv, tmp_path):
    (tmp_path / "empty").mkdir()
    p = vllm(simvenv, "serve", str(tmp_path / "empty"), "--port", "18998")
    assert p.returncode == 1 and "ensure the presence of a 'config.json'" in p.stderr


def test_ngram_lookup_defaults():
    sys.path.insert(0, str(SIMVLLM))
    from vllm.serveconfig import parse_speculative_config
    both = parse_speculative_config('{"method":"ngram","num_speculative_tokens":3}')
    assert (both["prompt_lookup_min"], both["prompt_lookup_max"]) == (5, 5)
    one = parse_speculative_config('{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":7}')
    assert (one["prompt_lookup_min"], one["prompt_lookup_max"]) == (7, 7)


def test_spec_bench_loader_rules(tmp_path):
    sys.path.insert(0, str(SIMVLLM))
    import random
    from vllm.bench.dataset import load_spec_bench, sample
    path = tmp_path / "q.jsonl"
    rows = [{"question_id": i, "category": "qa" if i % 2 else "rag", "turns": [f"q{i}", f"second{i}"]}
            for i in range(10)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    data = load_spec_bench(str(path), None, disable_shuffle=False)
    expect = [{"prompt": f"q{i}", "category": "qa" if i % 2 else "rag"} for i in range(10)]
    random.seed(0)
    random.shuffle(expect)
    assert data == expect  # seed 0 whatever --seed says; turns[0] only; the category rides along
    assert [d["prompt"] for d in load_spec_bench(str(path), "qa", True)] == ["q1", "q3", "q5", "q7", "q9"]
    reqs = sample(data, 13, 32)
    assert len(reqs) == 13 and len({r.request_id for r in reqs}) == 13
    assert len(sample(data, 13, 32, no_oversample=True)) == 10
    assert len(sample(data, -1, 32)) == 10


# ------------------------------------------------------------------ serving + results
def test_vanilla_run_matches_real_result_format(servers, simvenv, model_dir, dataset, tmp_path, gpu_dir):
    srv = servers()
    srv.wait_healthy()
    ec = srv.enginecore
    assert (gpu_dir / "reservations" / str(ec)).read_text().strip() == str(int(0.95 * 97887))
    with open(f"/proc/{ec}/comm") as f:
        assert f.read().strip() == "VLLM::EngineCor"
    models = json.loads(urllib.request.urlopen(srv.url + "/v1/models").read())
    assert models["data"][0]["id"] == "bench" and models["data"][0]["root"] == str(model_dir)
    assert "spec_decode" not in srv.metrics()
    out = tmp_path / "vanilla_conc1.json"
    p = run_bench(simvenv, srv, model_dir, dataset, out, conc=1, n=8, out_len=64)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Serving Benchmark Result" in p.stdout
    got = load(out)
    same_shape(got, load(FIXTURES / "vanilla_conc1.json"))
    assert not any(k.startswith("spec_decode") for k in got)
    assert got["completed"] == 8 and got["failed"] == 0 and got["num_prompts"] == 8
    assert 38 < got["mean_tpot_ms"] < 56  # report §4.1: 46.94 ms at concurrency 1
    log = srv.log_path.read_text()
    for needle in ("SIMULATED", "GPU KV cache size: 103,840 tokens",
                   "Maximum concurrency for 2,048 tokens per request: 50.70x", "Model loading took 61.03 GiB",
                   f"Starting vLLM server on http://127.0.0.1:{srv.port}", f"(EngineCore pid={ec})"):
        assert needle in log
    srv.stop()
    assert not pid_alive(ec)
    assert not (gpu_dir / "reservations" / str(ec)).exists()


@pytest.mark.parametrize("spec", [NGRAM, "eagle3"])
def test_spec_decode_numbers_follow_vllm_formulas(servers, simvenv, model_dir, dataset, tmp_path, spec):
    if spec == "eagle3":
        spec = {"method": "eagle3", "model": str(model_dir), "num_speculative_tokens": 3}
    srv = servers(spec=spec)
    srv.wait_healthy()

    def counters():
        c = {"per_pos": {}}
        for line in srv.metrics().splitlines():
            if line.startswith("vllm:spec_decode") and "_total{" in line:
                name, value = line.split("{")[0].removesuffix("_total"), float(line.rsplit(" ", 1)[1])
                if "per_pos" in name:
                    c["per_pos"][int(line.split('position="')[1].split('"')[0])] = value
                else:
                    c[name] = value
        return c
    before = counters()
    assert len(before["per_pos"]) == spec["num_speculative_tokens"]
    out = tmp_path / "spec.json"
    p = run_bench(simvenv, srv, model_dir, dataset, out, conc=4, n=8, out_len=96,
                  extra=["--temperature", "0", "--save-detailed"])
    assert p.returncode == 0, p.stdout + p.stderr
    after = counters()
    got = load(out)
    same_shape(got, load(FIXTURES / "ngram_conc4_greedy_detailed.json"))
    drafts = after["vllm:spec_decode_num_drafts"] - before["vllm:spec_decode_num_drafts"]
    dtok = after["vllm:spec_decode_num_draft_tokens"] - before["vllm:spec_decode_num_draft_tokens"]
    acc = after["vllm:spec_decode_num_accepted_tokens"] - before["vllm:spec_decode_num_accepted_tokens"]
    assert drafts > 0 and got["spec_decode_num_drafts"] == drafts
    assert got["spec_decode_draft_tokens"] == dtok == drafts * spec["num_speculative_tokens"]
    assert got["spec_decode_accepted_tokens"] == acc
    assert got["spec_decode_acceptance_rate"] == pytest.approx(100 * acc / dtok)
    assert got["spec_decode_acceptance_length"] == pytest.approx(1 + acc / drafts)
    per_pos = [(after["per_pos"][i] - before["per_pos"][i]) / drafts for i in sorted(after["per_pos"])]
    assert got["spec_decode_per_position_acceptance_rates"] == pytest.approx(per_pos)
    assert sum(got["output_lens"]) == got["total_output_tokens"]
    # several tokens per SSE chunk: ITL > TPOT under speculative decoding (report §4.5)
    assert got["mean_itl_ms"] > got["mean_tpot_ms"]


def test_speed_factor_five_percent_slower(servers, simvenv, model_dir, dataset, tmp_path, gpu_dir):
    other_node = tmp_path / "gpu-node2"
    subprocess.run(["cp", "-r", str(gpu_dir), str(other_node)], check=True)
    fast = servers(host_cfg={"speed_factor": 1.0, "noise": 0.0, "fault": None}, scale=0.1)
    slow = servers(host_cfg={"speed_factor": 0.95, "noise": 0.0, "fault": None}, scale=0.1, gpu=other_node)
    fast.wait_healthy()
    slow.wait_healthy()
    tput = {}
    for name, srv in (("fast", fast), ("slow", slow)):
        out = tmp_path / f"{name}.json"
        p = run_bench(simvenv, srv, model_dir, dataset, out, conc=4, n=8, out_len=128,
                      extra=["--temperature", "0"])
        assert p.returncode == 0, p.stderr
        tput[name] = load(out)["output_throughput"]
    assert tput["slow"] / tput["fast"] == pytest.approx(0.95, abs=0.025)


# ------------------------------------------------------------------ faults and process life
def test_fault_die_during_load(servers):
    srv = servers(host_cfg={"fault": "die-during-load"})
    assert srv.proc.wait(timeout=20) != 0
    tail = srv.tail()
    assert "CUDA out of memory" in tail and "Engine core initialization failed" in tail


def test_fault_never_healthy_refuses_connections(servers):
    srv = servers(host_cfg={"fault": "never-healthy"})
    ec = srv.find_enginecore()
    end = time.monotonic() + 3
    while time.monotonic() < end:
        assert srv.health() is None  # bound but not listening: connection refused
        assert srv.proc.poll() is None
        time.sleep(0.2)
    srv.stop()
    assert not pid_alive(ec)


def test_fault_crash_mid_bench(servers, simvenv, model_dir, dataset, tmp_path):
    srv = servers(host_cfg={"fault": "crash-mid-bench", "crash_after_requests": 3})
    srv.wait_healthy()
    out = tmp_path / "crash.json"
    p = run_bench(simvenv, srv, model_dir, dataset, out, conc=2, n=8, out_len=64)
    assert p.returncode == 0, p.stderr
    got = load(out)
    assert got["failed"] > 0 and got["completed"] + got["failed"] == 8
    assert srv.health() == 503
    assert "illegal memory access" in srv.tail(80)


def test_fault_leave_enginecore_survives_sigterm(servers, gpu_dir):
    srv = servers(host_cfg={"fault": "leave-enginecore"})
    srv.wait_healthy()
    ec = srv.enginecore
    kill_pid(srv.proc.pid, signal.SIGTERM)
    srv.proc.wait(timeout=10)
    time.sleep(0.3)
    assert pid_alive(ec) and "VLLM::EngineCore" in cmdline(ec)[0]
    assert (gpu_dir / "reservations" / str(ec)).exists()
    kill_pid(ec)  # the test cleans up the orphan by PID


def test_sigkill_parent_leaves_enginecore(servers, gpu_dir):
    srv = servers()
    srv.wait_healthy()
    ec = srv.enginecore
    kill_pid(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(timeout=10)
    time.sleep(0.5)
    assert pid_alive(ec), "EngineCore must not detect parent death (vLLM issue #55510)"
    assert (gpu_dir / "reservations" / str(ec)).exists()
    kill_pid(ec, signal.SIGTERM)
    end = time.monotonic() + 5
    while pid_alive(ec) and time.monotonic() < end:
        time.sleep(0.05)
    assert not pid_alive(ec)


def test_second_server_fails_when_gpu_memory_is_held(servers):
    first = servers()
    first.wait_healthy()
    second = servers()
    assert second.proc.wait(timeout=20) == 1
    assert "less than desired GPU memory utilization" in second.tail()

