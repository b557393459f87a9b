"""The worker-side runner, end to end against a fake vllm and a fake nvidia-smi."""
import calendar
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specfleet.worker.host import sourced_env
from specfleet.worker.runner import EXIT_FAILED, EXIT_FATAL, EXIT_LOCKED, EXIT_OK, EXIT_STOPPED


def wait_for(cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False


SIM_VERSION = "simvllm 1.0 (simulated vLLM)"


def status(bed, name):
    try:
        return bed.items()[name]["status"]
    except (OSError, ValueError, KeyError):
        return None


def test_happy_path(bed):
    rc = bed.run(bed.spec(bed.plan()))
    assert rc == EXIT_OK, bed.log()
    st = bed.state()
    # the version of the venv python's `vllm` package (here the simulator, see conftest), not `vllm --version`
    assert st["status"] == "done" and st["vllm_version"] == SIM_VERSION
    assert st["model_path"].endswith("/models/m")  # the first candidate does not exist: fallback
    for cfg in ("vanilla", "ngram", "eagle3"):
        for conc in (1, 16):
            res = json.loads((bed.run_dir / f"{cfg}_conc{conc}.json").read_text())
            assert res["config"] == cfg and res["node"] == "w1" and res["max_concurrency"] == conc
            assert res["vllm_version"] == SIM_VERSION and res["tokenizer_id"] == st["model_path"]
        assert json.loads((bed.run_dir / f"{cfg}.done").read_text())["item_hash"]
        assert bed.items()[cfg]["status"] == "done"
    assert not list(bed.run_dir.glob("*.partial"))
    # prefix cache policy 'reset': one server per item, reset between concurrencies
    assert "POST /reset_prefix_cache -> 200" in (bed.run_dir / "vanilla.server.log").read_text()
    assert bed.gpu_used() == 0


def test_env_file_parsing(tmp_path):
    f = tmp_path / "e"
    f.write_text('export A=/x\nexport B="$A/bin:$PATH" # c\nexport C=\'$A\'\nD=${A}/y\n# x\n')
    env = sourced_env(str(f), {"PATH": "/usr/bin"})
    assert env["B"] == "/x/bin:/usr/bin" and env["C"] == "$A" and env["D"] == "/x/y"


def test_a_done_result_within_the_items_failed_request_tolerance_is_not_measured_again(bed):
    """The done marker stands while its results count by the item's own max_failed_requests (the
    spec has no top-level one: a result with a tolerated failed request was measured on every resume)."""
    from specfleet.worker.runner import Runner
    from specfleet.worker.runspec import RunSpec
    spec = RunSpec.load(bed.spec(bed.plan(benchmark={"max_failed_requests": 1}), queue=["vanilla"]))
    item = spec.items[0]
    runner = Runner(spec)
    rdir = Path(item.client.result_dir)
    rdir.mkdir(parents=True, exist_ok=True)
    result = {"duration": 1.0, "completed": 15, "failed": 1, "output_throughput": 1.0, "total_token_throughput": 1.0,
              "mean_tpot_ms": 1.0, "mean_ttft_ms": 1.0, "mean_itl_ms": 1.0}
    for b in item.bench:
        (rdir / b.result_file).write_text(json.dumps(result))
    assert runner.results_valid(item)
    (rdir / item.bench[0].result_file).write_text(json.dumps({**result, "completed": 14, "failed": 2}))
    assert not runner.results_valid(item)
    # a damaged count is an invalid result, measured again, not a crash of every resume (before: TypeError)
    (rdir / item.bench[0].result_file).write_text(json.dumps({**result, "failed": "1"}))
    assert not runner.results_valid(item)


def test_server_dies_during_load_fails_fast_next_runs(bed):
    rc = bed.run(bed.spec(bed.plan(faults={"ngram": "die-during-load"}, health_timeout_s=600)))
    assert rc == EXIT_FAILED
    it = bed.items()
    # fast: the dead server is seen at once, not after the 600 s health timeout (the item's own time,
    # not the whole run's, which the other items lengthen at load)
    took = [calendar.timegm(time.strptime(it["ngram"][k], "%Y-%m-%dT%H:%M:%SZ")) for k in ("started_at", "finished_at")]
    assert took[1] - took[0] < 60, it["ngram"]
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


# ---------------------------------------------------------------- prompts that do not fit (issue 10.4)
LONG = " ".join(["word"] * 3000)  # ~3000 tokens with the simulated engine's tokenizer


def long_dataset(bed):
    rows = [{"question_id": i, "turns": [f"question {i}?"]} for i in range(16)]
    rows[5] = {"question_id": 306, "category": "summarization", "turns": [LONG]}
    bed.dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_prompt_that_does_not_fit_is_refused_before_the_load(bed):
    long_dataset(bed)
    plan = bed.plan(args=["--max-model-len", "2048"], benchmark={"output_len": 512})
    t0 = time.monotonic()
    rc = bed.run(bed.spec(plan, queue=["vanilla", "ngram"]))
    assert rc == EXIT_FAILED, bed.log()
    assert time.monotonic() - t0 < 30
    for name in ("vanilla", "ngram"):
        it = bed.items()[name]
        assert it["status"] == "failed" and it["phase"] == "failed during preflight", it
        assert "1 of 16 selected prompts do not fit --max-model-len 2048 with output_len 512" in it["error"]
        assert "question_id 306 (" in it["error"] and "raise --max-model-len to" in it["error"]
        assert "prompts_that_do_not_fit: drop" in it["error"]
        assert it["prompt_fit"]["tokenizer"].startswith("specfleet-simvllm")
        assert not (bed.run_dir / f"{name}.server.log").exists()  # no model load for nothing


def test_prompt_that_does_not_fit_is_dropped_when_the_plan_says_so(bed):
    long_dataset(bed)
    plan = bed.plan(args=["--max-model-len", "2048"],
                    benchmark={"output_len": 512, "prompts_that_do_not_fit": "drop"})
    assert bed.run(bed.spec(plan, queue=["vanilla"])) == EXIT_OK, bed.log()
    res = json.loads((bed.run_dir / "vanilla_conc16.json").read_text())
    assert (res["num_prompts"], res["completed"], res["disable_shuffle"]) == (15, 15, True)
    assert (res["prompts_dropped"], res["prompts_dropped_ids"], res["prompts_selected"]) == ("1", "306", "16")
    kept = [json.loads(x)["question_id"] for x in open(res["dataset_path"])]
    assert len(kept) == 15 and 306 not in kept
    assert any("dropped" in n for n in bed.items()["vanilla"]["notes"])


def test_a_run_with_failed_requests_does_not_count_and_says_what_vllm_said(bed, monkeypatch):
    monkeypatch.setenv("FAKE_FAILED", "2")
    monkeypatch.setenv("FAKE_ERROR", '400 Bad Request: {"error": {"message": "This model\'s maximum context '
                       'length is 2048 tokens. However, you requested 2090 tokens", "code": 400}}')
    rc = bed.run(bed.spec(bed.plan(), queue=["vanilla"]))
    assert rc == EXIT_FAILED
    it = bed.items()["vanilla"]
    assert it["error"].endswith("vLLM said: 2 x This model's maximum context length is 2048 tokens. However, "
                                "you requested 2090 tokens"), it["error"]
    assert "2 of 16 requests did not complete" in it["error"]
    assert not (bed.run_dir / "vanilla.done").exists()
    # the plan's tolerance
    rc = bed.run(bed.spec(bed.plan(benchmark={"max_failed_requests": 2}), queue=["vanilla"]))
    assert rc == EXIT_OK and bed.items()["vanilla"]["status"] == "done"


def test_sampling_in_force_is_recorded_with_every_result(bed):
    (bed.model / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "eos_token_id": [1]}))
    assert bed.run(bed.spec(bed.plan(benchmark={"temperature": None}), queue=["vanilla"])) == EXIT_OK, bed.log()
    res = json.loads((bed.run_dir / "vanilla_conc1.json").read_text())
    assert res["temperature_sent"] is None  # not sent: the server's defaults apply, as in the report
    assert res["sampling_params"] == "{}" and res["decoding"] == "sampled (temperature 0.6)"
    gen = json.loads(res["generation_config"])
    assert gen["params"] == {"temperature": 0.6, "top_k": 20, "top_p": 0.95}
    assert gen["source"].endswith("generation_config.json")
    assert bed.run(bed.spec(bed.plan(), queue=["vanilla"], name="greedy.json")) == EXIT_OK
    res = json.loads((bed.run_dir / "vanilla_conc1.json").read_text())
    assert res["temperature_sent"] == "0" and res["decoding"] == "greedy"
    assert res["sampling_params"] == '{"temperature":0.0}' and res["repeats"] == "1"
    # server.generation_config: vllm (a typed plan field, rendered as --generation-config, never read back
    # from the argv): the model's file is not what the server applies, vLLM's own defaults are
    plan = bed.plan(benchmark={"temperature": None}, generation_config="vllm")
    assert bed.run(bed.spec(plan, queue=["vanilla"], name="vllm.json")) == EXIT_OK, bed.log()
    res = json.loads((bed.run_dir / "vanilla_conc1.json").read_text())
    assert json.loads(res["generation_config"]) == {"source": "vllm defaults", "params": {}}
    assert res["decoding"] == "sampled (temperature 1)"
    starts = [ln for ln in (bed.run_dir / "vanilla.server.log").read_text().splitlines() if ln.startswith("==== ")]
    assert starts[-1].count("--generation-config") == 1 and "--generation-config vllm" in starts[-1]


def test_repeats_run_interleaved_on_one_server_start(bed):
    plan = bed.plan(benchmark={"repeat": 2, "repeat_isolation": "cache-reset"})
    assert bed.run(bed.spec(plan, queue=["vanilla"])) == EXIT_OK, bed.log()
    assert bed.items()["vanilla"]["results"] == [str(bed.run_dir / f"vanilla_conc{c}_r{r}.json")
                                                 for r in (1, 2) for c in (1, 16)]
    log = (bed.run_dir / "vanilla.server.log").read_text()
    assert log.count("==== specfleet") == 1 and log.count("POST /reset_prefix_cache -> 200") == 3


# ---------------------------------------------------------------- faults (issue 11.7)
def test_server_ended_by_a_shutdown_is_an_interruption_not_a_failure(bed, monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_S", "3")
    p = bed.start(bed.spec(bed.plan(), queue=["vanilla"]))
    assert wait_for(lambda: status(bed, "vanilla") == "benchmarking", 30)
    server = bed.items()["vanilla"]["server_pid"]
    os.kill(server, signal.SIGTERM)  # a shutdown signals everything: the server first, here,
    time.sleep(1.5)                  # and the runner a moment (its stop takes 0.5 s) later
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == EXIT_STOPPED
    it = bed.items()["vanilla"]
    assert it["status"] == "pending" and "exited with code" not in it["phase"], it
    assert "stopped by SIGTERM" in it["error"]


def test_after_a_reboot_the_runner_says_so_and_names_fab_provision(bed, monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_S", "3")
    spec = bed.spec(bed.plan(), queue=["vanilla"])
    p = bed.start(spec)
    # the status says "benchmarking" a moment before the phase names the bench run: wait for both
    assert wait_for(lambda: status(bed, "vanilla") == "benchmarking"
                    and bed.items()["vanilla"]["phase"].startswith("bench concurrency 1"), 60)
    os.killpg(p.pid, signal.SIGKILL)  # power off: the runner gets no word in
    p.wait()
    bed.cleanup()
    st = bed.state()
    st["boot"] = "an-earlier-boot/0"  # the boot identity changes with a reboot
    (bed.run_dir / "state.json").write_text(json.dumps(st))
    (bed.model / "config.json").unlink()  # the share is not mounted yet
    assert bed.run(spec) == EXIT_FAILED
    st = bed.state()
    it = st["items"][0]
    assert it["interrupted"] == "host rebooted during benchmarking (bench concurrency 1 (bench run 1 of 2 on this server))"
    assert "no readable model directory" in it["error"] and "run `fab provision`" in it["error"]
    assert "host rebooted" in st["rebooted"]


def test_a_full_disk_ends_the_server_and_says_no_space_left(bed, tmp_path):
    """The run folder on a 4 MiB tmpfs in a private mount namespace (root only), filled mid-run."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a private tmpfs")
    bed.work.mkdir()
    spec = bed.spec(bed.plan(), queue=["vanilla", "ngram"])
    log = open(tmp_path / "runner-full.log", "w")
    env = {**bed.env(), "FAKE_BENCH_S": "2"}
    p = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                          # the runner's last state is copied out before the namespace (and
                          # its tmpfs) ends: polling from outside can miss the final write
                          f"mount -t tmpfs -o size=4m sf-test {bed.work} || exit 99; {sys.executable} -S "
                          f"{bed.runner} --spec {spec}; rc=$?; "
                          f"cp {bed.run_dir}/state.json {tmp_path}/final-state.json; exit $rc"],
                         stdout=log, stderr=subprocess.STDOUT, env=env,
                         start_new_session=True)
    bed.procs.append(p)
    root = Path(f"/proc/{p.pid}/root")
    run_dir = root / str(bed.run_dir).lstrip("/")

    def benchmarking():
        try:
            return json.loads((run_dir / "state.json").read_text())["items"][0]["status"] == "benchmarking"
        except (OSError, ValueError, KeyError, IndexError):
            return False
    assert wait_for(benchmarking, 30), (tmp_path / "runner-full.log").read_text()
    with open(run_dir / "filler", "wb") as f:  # fill the disk
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    assert p.wait(timeout=60) == EXIT_FATAL, (tmp_path / "runner-full.log").read_text()
    state = json.loads((tmp_path / "final-state.json").read_text())
    out = (tmp_path / "runner-full.log").read_text()
    assert f"no space left on {bed.run_dir}" in out, out
    assert state.get("status") == "failed" and "no space left on" in state.get("error", ""), state
    assert bed.gpu_used() == 0  # its server and engine ended too

def test_done_item_whose_result_is_invalid_is_measured_again(bed):
    """A done marker is not trusted when a result file it stands for was corrupted (issue 10.5):
    resuming measures that item again, and only that item."""
    spec = bed.spec(bed.plan(), queue=["vanilla", "ngram"])
    assert bed.run(spec) == EXIT_OK, bed.log()
    bad = next(p for p in bed.run_dir.glob("ngram_conc*.json") if not p.name.endswith(".record.json"))
    bad.write_text(bad.read_text()[:40])  # a half-written copy
    assert bed.run(spec) == EXIT_OK, bed.log()
    it = bed.items()
    assert it["vanilla"]["attempts"] == 1 and it["ngram"]["attempts"] == 2, it
    assert f"{bad.name} is missing or invalid: measured again" in bed.log()
    assert isinstance(json.loads(bad.read_text()), dict)


@pytest.mark.parametrize("spec, said", [
    ("[1, 2]", "RunSpec: expected an object, got list"),
    ('{"items": []}', "field 'schema': null is not 2: a run spec of another specfleet"),
    ("ITEMS5", "field 'items': expected a list, got 5"),
    ("ITEMSX", "field 'items[0]': expected an object, got \"x\""),
    ("PORT", "field 'port': expected an integer, got \"8000\""),
    ("NOBENCH", "field 'items[1].bench': missing"),
    ("{", "JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)")])
def test_a_malformed_run_spec_is_refused_with_exit_2_and_one_line_naming_the_field(tmp_path, spec, said):
    from specfleet.campaign import Paths, build_run_spec, load_plan
    from specfleet.worker.runner import EXIT_SPEC
    full = build_run_spec(load_plan("plans/demo.yml"), "w1", ["vanilla", "ngram"], Paths(venv="/v", work_dir="/w"),
                          run_id="r").to_json()
    del full["items"][1]["bench"]
    text = {"ITEMS5": json.dumps({**full, "items": 5}), "ITEMSX": json.dumps({**full, "items": ["x"]}),
            "PORT": json.dumps({**full, "port": "8000"}), "NOBENCH": json.dumps(full)}.get(spec, spec)
    path = tmp_path / "run.json"
    path.write_text(text)
    p = subprocess.run([sys.executable, "-m", "specfleet.worker", "--spec", str(path)], capture_output=True,
                       text=True, cwd=Path(__file__).resolve().parents[2], timeout=60)
    assert p.returncode == EXIT_SPEC, p.stderr
    assert p.stderr == f"specfleet runner: bad run spec {path}: {said}\n" or \
        p.stderr.startswith(f"specfleet runner: bad run spec {path}: {said}") and p.stderr.count("\n") == 1, p.stderr


@pytest.mark.parametrize("old", [{"items": [{"name": "vanilla", "attempts": None}]},
                                 {"boot": "an-earlier-boot/0", "items": [{"name": "vanilla", "error": "SIGTERM"}]}])
def test_a_state_json_with_items_of_wrong_types_is_not_a_crash(bed, old):
    """state.json is only the earlier runner's record: an item without a status or with a non-number
    of attempts (a hand edit, a damaged file) must not crash every resume (before: TypeError in the
    pool, KeyError 'status' after a reboot; exit 4)."""
    spec = bed.spec(bed.plan(), queue=["vanilla"])
    bed.run_dir.mkdir(parents=True)
    (bed.run_dir / "state.json").write_text(json.dumps(old))
    assert bed.run(spec) == EXIT_OK, bed.log()
    assert bed.items()["vanilla"]["status"] == "done" and bed.items()["vanilla"]["attempts"] == 1


def test_sigterm_to_every_process_during_the_fit_check_leaves_the_item_pending(bed):
    """A shutdown or Slurm's scancel signals every process, the fit check (a child in the runner's
    own process group) too: the item is interrupted, not failed (before: 'the prompt-length check
    failed (exit -15)', the runner 'failed', exit 1)."""
    started = bed.tmp / "fitcheck-started"
    py = bed.venv / "bin" / "python"
    head, rest = py.read_text().split("\n", 1)
    py.write_text(f'{head}\ncase "$*" in *fitcheck*) touch {started}; sleep 30;; esac\n{rest}')
    p = bed.start(bed.spec(bed.plan(), queue=["vanilla"]))
    assert wait_for(started.exists, 30), bed.log()
    os.killpg(p.pid, signal.SIGTERM)
    assert p.wait(timeout=60) == EXIT_STOPPED, bed.log()
    it = bed.items()["vanilla"]
    assert it["status"] == "pending" and "SIGTERM" in it["error"], it
