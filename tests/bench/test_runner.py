"""The worker-side runner, end to end against a fake vllm and a fake nvidia-smi."""
import json
import os
import signal
import time

from specfleet.bench.runner import EXIT_FAILED, EXIT_FATAL, EXIT_LOCKED, EXIT_OK, EXIT_STOPPED, parse_env_file


def wait_for(cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False


def test_happy_path(bed):
    rc = bed.run(bed.spec(bed.plan()))
    assert rc == EXIT_OK, bed.log()
    st = bed.state()
    assert st["status"] == "done" and st["vllm_version"] == "0.0.0+fake"
    assert st["model_path"].endswith("/models/m")  # the first candidate does not exist: fallback
    for cfg in ("vanilla", "ngram", "eagle3"):
        for conc in (1, 16):
            res = json.loads((bed.run_dir / f"{cfg}_conc{conc}.json").read_text())
            assert res["config"] == cfg and res["node"] == "w1" and res["max_concurrency"] == conc
            assert res["vllm_version"] == "0.0.0+fake" and res["tokenizer_id"] == st["model_path"]
        assert json.loads((bed.run_dir / f"{cfg}.done").read_text())["item_hash"]
        assert bed.items()[cfg]["status"] == "done"
    assert not list(bed.run_dir.glob("*.partial"))
    # prefix cache policy 'reset': one server per item, reset between concurrencies
    assert "POST /reset_prefix_cache -> 200" in (bed.run_dir / "vanilla.server.log").read_text()
    assert bed.gpu_used() == 0


def test_env_file_parsing(tmp_path):
    f = tmp_path / "e"
    f.write_text('export A=/x\nexport B="$A/bin:$PATH" # c\nexport C=\'$A\'\nD=${A}/y\n# x\n')
    env = parse_env_file(str(f), {"PATH": "/usr/bin"})
    assert env["B"] == "/x/bin:/usr/bin" and env["C"] == "$A" and env["D"] == "/x/y"


def test_server_dies_during_load_fails_fast_next_runs(bed):
    t0 = time.monotonic()
    rc = bed.run(bed.spec(bed.plan(faults={"ngram": "die-during-load"}, health_timeout_s=600)))
    assert rc == EXIT_FAILED
    assert time.monotonic() - t0 < 30
    it = bed.items()
    assert it["ngram"]["status"] == "failed"
    assert "exited with code 1" in it["ngram"]["error"] and "CUDA out of memory (fake)" in it["ngram"]["error"]
    assert it["eagle3"]["status"] == "done" and it["vanilla"]["status"] == "done"
    assert not (bed.run_dir / "ngram.done").exists()


def test_never_healthy_times_out(bed):
    rc = bed.run(bed.spec(bed.plan(faults={"vanilla": "never-healthy"}, health_timeout_s=3),
                          queue=["vanilla", "ngram"]))
    assert rc == EXIT_FAILED
    it = bed.items()
    assert "not healthy after 3" in it["vanilla"]["error"] and it["ngram"]["status"] == "done"


def test_preflight_failures_name_the_cause(bed):
    (bed.gpu / "driver-loaded").unlink()
    rc = bed.run(bed.spec(bed.plan(), queue=["vanilla"]))
    assert rc == EXIT_FAILED
    assert "GPU not visible" in bed.items()["vanilla"]["error"]
    (bed.gpu / "driver-loaded").touch()
    (bed.gpu / "base_mib").write_text("9000")
    rc = bed.run(bed.spec(bed.plan(stop_timeout_s=1), queue=["vanilla"]))
    assert "GPU memory used 9000 MiB" in bed.items()["vanilla"]["error"]
    (bed.gpu / "base_mib").unlink()
    bed.env_file.unlink()
    bed.run(bed.spec(bed.plan(), queue=["vanilla"]))
    assert "env file" in bed.items()["vanilla"]["error"]


def test_leftover_enginecore_is_ended(bed):
    rc = bed.run(bed.spec(bed.plan(faults={"vanilla": "leave-enginecore"}), queue=["vanilla", "ngram"]))
    assert rc == EXIT_FAILED, bed.log()
    it = bed.items()
    assert it["vanilla"]["status"] == "failed" and it["ngram"]["status"] == "done"
    assert "ending leftover VLLM:: processes of this run by PID" in bed.log()
    assert bed.gpu_used() == 0


def test_memory_not_released_stops_queue(bed):
    (bed.gpu / "base_mib").write_text("0")
    # something else grabs the GPU while the first item runs
    spec = bed.spec(bed.plan(), queue=["vanilla", "ngram"])
    p = bed.start(spec)
    assert wait_for(lambda: (bed.run_dir / "vanilla.server.log").exists())
    (bed.gpu / "base_mib").write_text("8000")
    assert p.wait(timeout=90) == EXIT_FATAL
    st = bed.state()
    assert st["status"] == "failed" and "GPU memory still 8000 MiB" in st["error"]
    assert bed.items()["ngram"]["status"] == "pending"


def test_second_runner_refused(bed):
    spec = bed.spec(bed.plan(faults={"vanilla": "never-healthy"}, health_timeout_s=60), queue=["vanilla"])
    first = bed.start(spec)
    assert wait_for(lambda: (bed.run_dir / "state.json").exists())
    assert bed.run(spec) == EXIT_LOCKED
    assert "another runner holds" in bed.log() and f"pid={first.pid}" in bed.log()
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == EXIT_STOPPED
    assert bed.items()["vanilla"]["status"] == "pending" and bed.gpu_used() == 0


def test_killed_runner_resumes_without_redoing(bed, monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_S", "1.5")
    spec = bed.spec(bed.plan())
    p = bed.start(spec)
    assert wait_for(lambda: (bed.run_dir / "vanilla.done").exists(), 60)
    assert wait_for(lambda: bed.items()["ngram"]["status"] == "benchmarking", 30)
    os.kill(p.pid, signal.SIGKILL)  # the runner only; its server and engine stay behind
    p.wait()
    first_done = (bed.run_dir / "vanilla.done").read_text()
    assert bed.gpu_used() > 0
    monkeypatch.setenv("FAKE_BENCH_S", "0.2")
    assert bed.run(spec) == EXIT_OK, bed.log()
    assert (bed.run_dir / "vanilla.done").read_text() == first_done
    it = bed.items()
    assert it["vanilla"]["attempts"] == 1 and it["ngram"]["attempts"] == 2 and it["eagle3"]["attempts"] == 1
    assert "ending processes an earlier runner left" in bed.log()
    assert all(v["status"] == "done" for v in it.values()) and bed.gpu_used() == 0


def test_failed_bench_keeps_partial(bed, monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_FAIL", "vanilla")
    rc = bed.run(bed.spec(bed.plan(), queue=["vanilla", "ngram"]))
    assert rc == EXIT_FAILED
    it = bed.items()
    assert "exited with code 1" in it["vanilla"]["error"] and "fake client crash" in it["vanilla"]["error"]
    assert (bed.run_dir / "vanilla_conc1.json.partial").exists()
    assert not (bed.run_dir / "vanilla_conc1.json").exists() and not (bed.run_dir / "vanilla.done").exists()
    assert it["ngram"]["status"] == "done" and bed.gpu_used() == 0


def test_done_item_whose_result_is_invalid_is_measured_again(bed):
    """A done marker is not trusted when a result file it stands for was corrupted (issue 10.5):
    resuming measures that item again, and only that item."""
    spec = bed.spec(bed.plan(), queue=["vanilla", "ngram"])
    assert bed.run(spec) == EXIT_OK, bed.log()
    bad = next(bed.run_dir.glob("ngram_conc*.json"))
    bad.write_text(bad.read_text()[:40])  # a half-written copy
    assert bed.run(spec) == EXIT_OK, bed.log()
    it = bed.items()
    assert it["vanilla"]["attempts"] == 1 and it["ngram"]["attempts"] == 2, it
    assert f"{bad.name} is missing or invalid: measured again" in bed.log()
    assert isinstance(json.loads(bad.read_text()), dict)
