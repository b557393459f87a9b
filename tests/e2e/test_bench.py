"""`fab bench` / `fab stop` end to end on the namespace testbed with the simulated vLLM.

The campaign is the field report's (4 configurations, concurrency 1 and 16, 2 workers) made short
(tests/e2e/plans/fast.yml: 4 prompts x 64 tokens). Every assertion about a worker reads the worker
itself (`tb.exec`: nsenter, no SSH) or its result files, never fab's output alone.

The tests share one 2-worker testbed, brought up and provisioned once (`provisioned_bed`); before each
test `reset` ends what a test left running, clears engine faults, removes the campaign's run folders and
provisions again a worker that a reboot left unprovisioned, so every test starts as on a fresh testbed.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from e2e_helpers import FAB, PROJECT, events, fab, host_sh, inventory_of, worker_procs

pytestmark = pytest.mark.e2e

FAST = PROJECT / "tests/e2e/plans/fast.yml"
CAMPAIGN = "e2e-fast"
WORK = "/var/lib/specfleet/campaigns"
CONFIGS = ["vanilla", "ngram", "ngram_improved", "eagle3"]
CONCS = [1, 16]
REPORT_PINS = ["--assign", "ngram=w1", "--assign", "ngram_improved=w1", "--assign", "eagle3=w2"]
REPORT_QUEUES = {"w1": ["vanilla", "ngram", "ngram_improved"], "w2": ["vanilla", "eagle3"]}
GPU_FREE_MIB = 5000  # the plan's gpu_memory_free_mib


# ---------------------------------------------------------------- helpers
def plan_variant(tmp_path: Path, edit) -> Path:
    """fast.yml changed by `edit(doc)`; its dataset (relative to fast.yml) made absolute for the copy."""
    doc = yaml.safe_load(FAST.read_text())
    doc["benchmark"]["dataset_path"] = str((FAST.parent / doc["benchmark"]["dataset_path"]).resolve())
    edit(doc)
    out = tmp_path / "plan.yml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def run_dir(host: str) -> str:
    return f"{WORK}/{CAMPAIGN}/{host}"


def host_json(tb, host: str, path: str) -> dict | None:
    p = host_sh(tb, host, f"cat {shlex.quote(path)} 2>/dev/null")
    try:
        return json.loads(p.stdout) if p.stdout.strip() else None
    except ValueError:
        return None


def state(tb, host: str) -> dict | None:
    return host_json(tb, host, f"{run_dir(host)}/state.json")


def items(st: dict | None) -> dict[str, dict]:
    return {i["name"]: i for i in (st or {}).get("items", [])}


def wait_for(cond, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)




def procs(tb, host: str) -> list[tuple[int, str]]:
    return [(pid, a) for pid, a in worker_procs(tb, host) if "sshd" not in a]


def vllm_procs(tb, host: str) -> list[tuple[int, str]]:
    return [(pid, a) for pid, a in procs(tb, host) if a.startswith("VLLM::") or " serve " in f" {a} "]


def runner_procs(tb, host: str) -> list[tuple[int, str]]:
    return [(pid, a) for pid, a in procs(tb, host) if "runner.py" in a and "--spec" in a]


def gpu_used(tb, host: str) -> int:
    p = host_sh(tb, host, "nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits")
    assert p.returncode == 0, p.stdout + p.stderr
    return int(p.stdout.split()[0])


def lock_pid(tb, host: str) -> int | None:
    out = host_sh(tb, host, f"cat {WORK}/.specfleet-runner.lock 2>/dev/null").stdout
    return int(out.split()[0].removeprefix("pid=")) if out.startswith("pid=") else None


def mtimes(tb, host: str, names: list[str]) -> dict[str, str]:
    out = host_sh(tb, host, f"cd {run_dir(host)} && stat -c '%n %.9Y' " + " ".join(map(shlex.quote, names))).stdout
    return dict(ln.split(" ", 1) for ln in out.splitlines())


def result_names(configs: list[str]) -> list[str]:
    return [f"{c}_conc{n}.json" for c in configs for n in CONCS]


def assert_results(tb, host: str, configs: list[str]) -> None:
    """Every result file of `configs` exists on the worker, is JSON, simulated, at the right concurrency."""
    for cfg in configs:
        for n in CONCS:
            path = f"{run_dir(host)}/{cfg}_conc{n}.json"
            r = host_json(tb, host, path)
            assert r is not None, f"{host}:{path} missing or not JSON"
            assert r["simulated"] is True and r["engine"] == "specfleet-simvllm", path
            assert r["max_concurrency"] == n, (path, r["max_concurrency"])
            assert (r["node"], r["config"], r["campaign"]) == (host, cfg, CAMPAIGN), path
            assert r["completed"] == 4 and r["num_prompts"] == 4, path


def assert_idle(tb, host: str) -> None:
    """No runner, no vllm serve, no VLLM:: process on the worker, and the GPU's memory back to 0."""
    assert runner_procs(tb, host) == [], runner_procs(tb, host)
    assert vllm_procs(tb, host) == [], vllm_procs(tb, host)
    assert gpu_used(tb, host) == 0


def provision(tb, runs: Path) -> None:
    out = fab("provision", inventory=inventory_of(tb), runs=runs)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def provisioned_ok(tb, host: str) -> bool:
    """What a reboot undoes and `fab provision` brings back: the NFS share mounted, the GPU modules loaded."""
    return host_sh(tb, host, "findmnt /mnt/fabrix && nvidia-smi -L").returncode == 0


def reset(tb, runs: Path) -> None:
    """The shared testbed as a test would find a fresh one: no runner, server or bench client left on a
    worker (a failed test's), no engine fault, no campaign folder (each test starts its own run folder),
    the GPU's memory back to 0, and every worker provisioned (a test that rebooted one and failed before
    its own `fab provision` leaves it unprovisioned)."""
    for h in ("w1", "w2"):
        left = [pid for pid, _ in runner_procs(tb, h) + vllm_procs(tb, h)]
        if left:
            host_sh(tb, h, "kill -KILL " + " ".join(map(str, left)) + " 2>/dev/null; true")
        tb.fault(h, "clear-engine-fault")
        # a test's own mounts under the work folder (the full-disk tmpfs) go first, innermost first
        p = host_sh(tb, h, f"findmnt -rn -o TARGET | grep '^{WORK}' | sort -r | xargs -r umount -l; rm -rf {WORK}")
        assert p.returncode == 0, p.stderr
        # SIGKILLed: gone at the next look in every reset at load 12-36 (2026-12-02); 10 s is slack
        wait_for(lambda: not (runner_procs(tb, h) + vllm_procs(tb, h)), 10, f"{h}'s leftover processes to end")
    if not all(provisioned_ok(tb, h) for h in ("w1", "w2")):
        provision(tb, runs)
    for h in ("w1", "w2"):
        wait_for(lambda: gpu_used(tb, h) == 0, 10, f"{h}'s GPU memory back to 0")  # a reservation ends with its process


MODULE_TESTBED = {"workers": 2}  # module_bed (tests/e2e/conftest.py)


@pytest.fixture(scope="module")
def provisioned_bed(module_bed, tmp_path_factory):
    """Two workers brought up and provisioned once for the whole module (each test used to bring up and
    provision its own: docs/dev/testing.md)."""
    provision(module_bed, tmp_path_factory.mktemp("runs-provision"))
    return module_bed


@pytest.fixture
def tb(provisioned_bed, tmp_path):
    """The module's provisioned testbed, reset for this test; the test's fab runs and results stay in
    its own tmp_path."""
    reset(provisioned_bed, tmp_path / "runs-reset")
    return provisioned_bed


def bench(tb, tmp_path: Path, *args: str, plan: Path = FAST, timeout: float = 240, tag: str = "bench"):
    return fab("bench", "--hosts", "w1,w2", "--plan", str(plan), "--poll", "0.5", "--results", str(tmp_path / "results"),
               *args, inventory=inventory_of(tb), runs=tmp_path / f"runs-{tag}", timeout=timeout)


@contextmanager
def fab_in_background(tb, tmp_path: Path, *argv: str, tag: str = "bg"):
    """`fab ARGV` running in the background (output in bench-<tag>.log, events in runs-<tag>) for the
    block; still running when the block ends (a failed wait, an assertion): killed and reaped, never
    left behind."""
    env = {**os.environ, "COLUMNS": "200", "SPECFLEET_INVENTORY": str(inventory_of(tb)),
           "SPECFLEET_RUNS_DIR": str(tmp_path / f"runs-{tag}")}
    with open(tmp_path / f"bench-{tag}.log", "w") as log:
        p = subprocess.Popen([FAB, *argv], cwd=PROJECT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield p
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


def bench_in_background(tb, tmp_path: Path, *args: str, plan: Path = FAST, tag: str = "bg"):
    return fab_in_background(tb, tmp_path, "bench", "--hosts", "w1,w2", "--plan", str(plan), "--poll", "0.5", *args,
                             tag=tag)


@contextmanager
def frozen(pids: list[int]):
    """The processes stopped (SIGSTOP) for the block, continued at its end whatever happens."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        thaw(pids)


def thaw(pids: list[int]) -> None:
    """Continue stopped processes; one the runner has ended meanwhile (its stop kills the client) is gone."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def out_of(p: subprocess.CompletedProcess) -> str:
    return p.stdout[-4000:] + p.stderr[-2000:]


def item_status(tb, host: str, name: str, statuses) -> dict | None:
    it = items(state(tb, host)).get(name)
    return it if it and it["status"] in statuses else None


def secs(a: str, b: str) -> float:
    t = lambda s: time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ"))  # noqa: E731
    return t(b) - t(a)


# ---------------------------------------------------------------- 1. the report's campaign
def test_report_campaign_with_the_reports_split(tb, tmp_path):
    t0 = time.monotonic()
    out = bench(tb, tmp_path, *REPORT_PINS)
    took = time.monotonic() - t0
    assert out.returncode == 0, out_of(out)
    for host, queue in REPORT_QUEUES.items():
        spec = host_json(tb, host, f"{run_dir(host)}/run.json")
        assert [i["name"] for i in spec["items"]] == queue
        st = state(tb, host)
        assert st["status"] == "done" and st["host"] == host
        assert [(i["name"], i["status"], i["attempts"]) for i in st["items"]] == [(n, "done", 1) for n in queue]
        assert_results(tb, host, queue)
        others = set(CONFIGS) - set(queue)
        assert not host_sh(tb, host, " ".join(f"ls {run_dir(host)}/{c}_conc*.json 2>/dev/null;" for c in others)
                           ).stdout.strip(), f"{host} ran configurations of the other node"
        assert_idle(tb, host)
    assert took < 150, f"the short campaign took {took:.0f} s"


def test_report_campaign_with_the_automatic_split(tb, tmp_path):
    out = bench(tb, tmp_path)
    assert out.returncode == 0, out_of(out)
    queues = {h: [i["name"] for i in host_json(tb, h, f"{run_dir(h)}/run.json")["items"]] for h in ("w1", "w2")}
    # the baseline first on every node, every other configuration on exactly one node
    assert all(q[0] == "vanilla" for q in queues.values()), queues
    others = sorted(c for q in queues.values() for c in q[1:])
    assert others == sorted(set(CONFIGS) - {"vanilla"}), queues
    for host, queue in queues.items():
        st = state(tb, host)
        assert st["status"] == "done"
        assert [(i["name"], i["status"], i["attempts"]) for i in st["items"]] == [(n, "done", 1) for n in queue]
        assert_results(tb, host, queue)
        assert_idle(tb, host)
    # fab printed the split it ran, and no command line (--verbose prints them), then progress with times
    for host, queue in queues.items():
        assert f"{host}: " + " -> ".join(queue) in out.stdout
    assert "bin/vllm " not in out.stdout and "--verbose or --check prints" in out.stdout, out.stdout
    progress = [ln for ln in out.stdout.splitlines() if ln.startswith(("w1: ", "w2: ")) and "elapsed " in ln]
    assert progress and any(", ETA " in ln for ln in progress), out.stdout
    assert any("(bench run 1 of 2 on this server" in ln for ln in out.stdout.splitlines()), out.stdout
    # ... and wrote it once, at placement, for collect and report (report/scan/cells.py)
    planned = json.loads((tmp_path / "results" / yaml.safe_load(FAST.read_text())["campaign"] / "planned.json").read_text())
    assert planned["queues"] == queues and set(planned["sources"].values()) == {"placed by fab bench"}
    # the split's makespan, predicted at placement from the model (nothing ran yet), and at the end the
    # measured one beside it: the runners' first item start to last item end on the longer node
    said = " ".join(out.stdout.split())
    assert "predicted makespan " in said and "durations: the duration model (estimates" in said, out.stdout
    end = next(ln for ln in out.stdout.splitlines() if ln.startswith("makespan: predicted "))
    spans = [secs(min(i["started_at"] for i in state(tb, h)["items"]), max(i["finished_at"] for i in state(tb, h)["items"]))
             for h in queues]
    assert f"; measured {max(spans) / 60:.1f} min = {max(spans):.0f} s (first item start" in end, end
    # the same plan again resumes as placed: its own times do not re-split it (nothing done moves)
    again = bench(tb, tmp_path, "--check", tag="check")
    assert again.returncode == 0, out_of(again)
    assert "durations: the duration model (estimates" in " ".join(again.stdout.split()), again.stdout
    # an earlier campaign's folder named on the command line gives the split its measured times
    for h in queues:
        (tmp_path / "earlier" / h).mkdir(parents=True)
        for name in ("run.json", "state.json"):
            (tmp_path / "earlier" / h / name).write_text(json.dumps(host_json(tb, h, f"{run_dir(h)}/{name}")))
    measured = bench(tb, tmp_path, "--check", "--durations-from", str(tmp_path / "earlier"), tag="measured")
    assert measured.returncode == 0, out_of(measured)
    assert f"durations: measured for 4 of 4 configurations (from {tmp_path / 'earlier'})" in \
        " ".join(measured.stdout.split()), measured.stdout


# ---------------------------------------------------------------- 2. SSH side killed
def test_fab_killed_mid_run_reattaches_and_nothing_is_redone(tb, tmp_path):
    with bench_in_background(tb, tmp_path, *REPORT_PINS) as p:
        # w1's first item finished and its second one is under way
        wait_for(lambda: item_status(tb, "w1", "vanilla", ["done"])
                 and item_status(tb, "w1", "ngram", ["preflight", "loading", "benchmarking"]),
                 120, "w1 to finish vanilla and start ngram")
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
    pid = lock_pid(tb, "w1")
    st = state(tb, "w1")
    assert pid and st["runner_pid"] == pid and [pid] == [x for x, _ in runner_procs(tb, "w1")], \
        "the runner must survive its SSH session"
    done_before = {h: [n for n, i in items(state(tb, h)).items() if i["status"] == "done"] for h in ("w1", "w2")}
    before = {h: mtimes(tb, h, result_names(done_before[h])) for h in ("w1", "w2")}
    assert len(before["w1"]) == 2

    # The runner is held (SIGSTOP) until the second fab has found it: at load ~30 the rest of w1's queue
    # (a few seconds) once ended before that fab started (seconds there), which then found no runner.
    def w1_start():
        return [e for e in events(tmp_path / "runs-again") if e.get("step") == "start runner" and e["host"] == "w1"]
    with frozen([pid]), bench_in_background(tb, tmp_path, *REPORT_PINS, "--results", str(tmp_path / "results"),
                                            tag="again") as again:
        starts = wait_for(w1_start, 120, "the second fab bench to find w1's runner")
        os.kill(pid, signal.SIGCONT)
        rc = again.wait(timeout=240)
    assert rc == 0, (tmp_path / "bench-again.log").read_text()[-3000:]
    assert [e["message"] for e in starts] == [f"reattached to runner pid {pid}"], starts
    st = state(tb, "w1")
    assert st["runner_pid"] == pid, "a second runner was started instead of reattaching"
    assert host_sh(tb, "w1", f"grep -c '^.* runner pid ' {run_dir('w1')}/runner.log").stdout.strip() == "1"
    for host, queue in REPORT_QUEUES.items():
        st = state(tb, host)
        assert [(i["name"], i["status"], i["attempts"]) for i in st["items"]] == [(n, "done", 1) for n in queue]
        assert_results(tb, host, queue)
        assert mtimes(tb, host, list(before[host])) == before[host], "finished results were rewritten"
        assert_idle(tb, host)


# ---------------------------------------------------------------- 3. server dies during load
def test_server_dying_during_load_fails_fast_with_its_log_and_the_queue_goes_on(tb, tmp_path):
    tb.fault("w1", "die-during-load")
    with bench_in_background(tb, tmp_path, *REPORT_PINS) as p:
        # The engine reads the fault when it starts; once the first item's engine is loading,
        # clear it, so only this one server dies and the next items on w1 get a healthy engine.
        wait_for(lambda: "Starting to load model" in host_sh(
            tb, "w1", f"cat {run_dir('w1')}/vanilla.server.log 2>/dev/null").stdout, 60, "w1's first load")
        tb.fault("w1", "clear-engine-fault")
        rc = p.wait(timeout=180)
    log = (tmp_path / "bench-bg.log").read_text()
    assert rc == 2, log[-3000:]  # a host had a failed item
    v = items(state(tb, "w1"))["vanilla"]
    assert v["status"] == "failed" and v["attempts"] == 1
    assert secs(v["started_at"], v["finished_at"]) <= 20, v  # not the 40-minute health limit
    assert "vllm serve exited with code 1" in v["error"]
    # the server log's tail is in the error
    assert "torch.OutOfMemoryError: CUDA out of memory" in v["error"]
    assert "Engine core initialization failed" in v["error"]
    # ... and the rest of w1's queue ran after it
    st = state(tb, "w1")
    assert [(i["name"], i["status"], i["attempts"]) for i in st["items"][1:]] == \
        [("ngram", "done", 1), ("ngram_improved", "done", 1)]
    assert secs(v["finished_at"], items(st)["ngram"]["started_at"]) >= 0
    assert st["status"] == "failed"
    assert_results(tb, "w1", ["ngram", "ngram_improved"])
    assert not host_sh(tb, "w1", f"ls {run_dir('w1')}/vanilla_conc*.json 2>/dev/null").stdout.strip()
    assert_results(tb, "w2", REPORT_QUEUES["w2"])
    for h in ("w1", "w2"):
        assert_idle(tb, h)
    assert "OutOfMemoryError" in log  # fab reports the failed item too


# ---------------------------------------------------------------- 4. server never healthy
def test_never_healthy_server_times_out_per_the_plan(tb, tmp_path):
    plan = plan_variant(tmp_path, lambda d: d["server"].update(health_timeout_s=4))
    for h in ("w1", "w2"):
        tb.fault(h, "never-healthy")
    out = bench(tb, tmp_path, *REPORT_PINS, plan=plan)
    assert out.returncode == 2, out_of(out)
    for host, queue in REPORT_QUEUES.items():
        st = state(tb, host)
        assert st["status"] == "failed"
        for name in queue:  # every item was tried once, in turn, and timed out after about 4 s
            it = items(st)[name]
            assert (it["status"], it["attempts"]) == ("failed", 1), it
            assert it["error"].startswith(("server not healthy after 4 s", "server not healthy after 4.0 s")), it
            assert "Loading safetensors checkpoint shards:   0% Completed" in it["error"]  # log tail
            assert 3 <= secs(it["started_at"], it["finished_at"]) <= 25, it
        assert_idle(tb, host)  # the hung servers were stopped and their GPU memory freed


# ---------------------------------------------------------------- 5. API server SIGKILLed
def test_sigkilled_api_server_leaves_an_enginecore_that_the_runner_ends(tb, tmp_path):
    # 512 output tokens: a concurrency-1 run lasts a few seconds, time to kill its server under it
    plan = plan_variant(tmp_path, lambda d: d["benchmark"].update(output_len=512))
    with bench_in_background(tb, tmp_path, *REPORT_PINS, plan=plan) as p:
        # Catch w2's vanilla server while a bench runs against it; freeze the runner (SIGSTOP) so that the
        # state seen here stays true while the API server is SIGKILLed and its engine is inspected.
        for _ in range(200):
            wait_for(lambda: (it := item_status(tb, "w2", "vanilla", ["benchmarking"])) and "concurrency 1 " in
                     it["phase"], 120, "w2 benchmarking vanilla at concurrency 1", interval=0.05)
            runner = state(tb, "w2")["runner_pid"]
            os.kill(runner, signal.SIGSTOP)
            it = items(state(tb, "w2"))["vanilla"]
            serve = it["server_pid"]
            ps = procs(tb, "w2")
            engine = [pid for pid, a in ps if a.startswith("VLLM::EngineCore")
                      and host_sh(tb, "w2", f"cut -d' ' -f4 /proc/{pid}/stat").stdout.strip() == str(serve)]
            client = [pid for pid, a in ps if " bench serve " in a and "--max-concurrency 1 " in a]
            if it["status"] == "benchmarking" and engine and client and gpu_used(tb, "w2") >= GPU_FREE_MIB:
                break
            os.kill(runner, signal.SIGCONT)
        else:
            pytest.fail("never caught w2's server benchmarking")
        try:
            host_sh(tb, "w2", f"kill -9 {serve}")
            wait_for(lambda: all(pid != serve for pid, _ in procs(tb, "w2")), 10, "the API server to die")
            # the engine outlives its API server, reparented, still holding the GPU (report §3.5)
            left = [(pid, a) for pid, a in procs(tb, "w2") if pid == engine[0]]
            assert left and left[0][1].startswith("VLLM::EngineCore"), left
            assert host_sh(tb, "w2", f"cut -d' ' -f4 /proc/{engine[0]}/stat").stdout.strip() != str(serve)
            assert gpu_used(tb, "w2") >= GPU_FREE_MIB
        finally:
            os.kill(runner, signal.SIGCONT)
        rc = p.wait(timeout=180)
    assert rc == 2, (tmp_path / "bench-bg.log").read_text()[-3000:]
    st = state(tb, "w2")
    v, e = items(st)["vanilla"], items(st)["eagle3"]
    assert v["status"] == "failed" and v["attempts"] == 1
    assert "vllm serve exited with code -9" in v["error"] or "requests did not complete" in v["error"], v["error"]
    assert not host_sh(tb, "w2", f"ls {run_dir('w2')}/vanilla_conc*.json 2>/dev/null").stdout.strip()
    assert all(pid != engine[0] for pid, _ in procs(tb, "w2")), "the orphaned EngineCore is still alive"
    # the next item loaded (simvllm refuses to start while the old engine's memory is held) and ran
    assert (e["status"], e["attempts"]) == ("done", 1), e
    assert_results(tb, "w2", ["eagle3"])
    log = host_sh(tb, "w2", f"cat {run_dir('w2')}/runner.log").stdout.splitlines()
    stop = max(i for i, ln in enumerate(log) if "[vanilla] stopping" in ln)
    start = min(i for i, ln in enumerate(log) if "[eagle3] preflight" in ln)
    assert stop < start, "the next item started before the failed one was cleaned up"
    # the engine was ended with SIGTERM and released its GPU reservation itself
    assert "EngineCore: trigger received signal=SIGTERM" in host_sh(
        tb, "w2", f"cat {run_dir('w2')}/vanilla.server.log").stdout.split("==== specfleet")[-1]
    for h in ("w1", "w2"):
        assert_idle(tb, h)
    assert_results(tb, "w1", REPORT_QUEUES["w1"])


# ---------------------------------------------------------------- 6. worker rebooted
def test_rebooted_worker_resumes_after_provision(tb, tmp_path):
    with bench_in_background(tb, tmp_path, *REPORT_PINS) as p:  # fab follows the campaign while w1 reboots
        wait_for(lambda: item_status(tb, "w1", "vanilla", ["done"])
                 and item_status(tb, "w1", "ngram", ["loading", "benchmarking"]), 120, "w1 working on ngram")
        old_runner = lock_pid(tb, "w1")
        before = mtimes(tb, "w1", result_names(["vanilla"]))
        tb.reboot("w1")
        assert runner_procs(tb, "w1") == [] and vllm_procs(tb, "w1") == []
        assert host_sh(tb, "w1", "findmnt /mnt/fabrix").returncode != 0  # the NFS mount is gone
        after = state(tb, "w1")
        assert items(after)["ngram"]["status"] != "done"  # interrupted (the reboot's SIGTERM may have been seen)
        # the follower does not wait forever for a runner that is gone: it finishes w2, fails w1
        rc = p.wait(timeout=120)
    log = (tmp_path / "bench-bg.log").read_text()
    assert rc == 2, log[-3000:]
    # fab names the reboot and the fix, whether the shutdown stopped the runner or killed it
    assert "host rebooted" in log and "run `fab provision`" in log, log[-3000:]
    assert "vllm serve exited with code 0" not in json.dumps(state(tb, "w1")), state(tb, "w1")
    assert state(tb, "w2")["status"] == "done"

    # resuming before provision: the share is not mounted, the GPU modules not loaded; the runner says why
    early = bench(tb, tmp_path, *REPORT_PINS, tag="early")
    assert early.returncode == 2, out_of(early)
    st = state(tb, "w1")
    ng = items(st)["ngram"]
    assert ng["status"] == "failed" and "host rebooted" in ng["error"] and "run `fab provision`" in ng["error"], ng
    assert ng["interrupted"].startswith("host rebooted"), ng

    prov = fab("provision", inventory=inventory_of(tb), runs=tmp_path / "runs-reprovision")
    assert prov.returncode == 0, out_of(prov)
    assert host_sh(tb, "w1", "findmnt /mnt/fabrix && nvidia-smi -L").returncode == 0
    again = bench(tb, tmp_path, *REPORT_PINS, tag="again")
    assert again.returncode == 0, out_of(again)
    st = state(tb, "w1")
    assert st["status"] == "done" and st["runner_pid"] != old_runner
    assert [(i["name"], i["status"], i["attempts"]) for i in st["items"]] == \
        [("vanilla", "done", 1), ("ngram", "done", 3), ("ngram_improved", "done", 2)]
    assert mtimes(tb, "w1", list(before)) == before, "the done item was redone"
    van = items(st)["vanilla"]  # a skipped item keeps its record: results, finish time
    assert van["results"] == [f"{run_dir('w1')}/{f}" for f in result_names(["vanilla"])] and van["finished_at"]
    assert "[vanilla] done marker present: skipped" in host_sh(tb, "w1", f"cat {run_dir('w1')}/runner.log").stdout
    for host, queue in REPORT_QUEUES.items():
        assert_results(tb, host, queue)
        assert_idle(tb, host)


# ---------------------------------------------------------------- 7. one runner per host
def test_a_second_runner_on_the_same_host_is_refused(tb, tmp_path):
    first = bench(tb, tmp_path, *REPORT_PINS, "--no-wait", tag="first")
    assert first.returncode == 0, out_of(first)
    pid = wait_for(lambda: item_status(tb, "w1", "vanilla", ["loading", "benchmarking"]) and lock_pid(tb, "w1"),
                   60, "w1's runner to work")
    argv = host_sh(tb, "w1", f"tr '\\0' '\\n' < /proc/{pid}/cmdline").stdout.splitlines()
    assert "--spec" in argv, argv
    second = tb.exec("w1", argv, timeout=60)  # the very same command line, spec and all
    assert second.returncode == 3, (second.returncode, second.stdout, second.stderr)
    assert "another runner holds" in second.stderr and f"pid={pid} " in second.stderr, second.stderr
    assert "fab stop" in second.stderr, second.stderr
    # the first runner goes on undisturbed and finishes the queue
    assert lock_pid(tb, "w1") == pid and [x for x, _ in runner_procs(tb, "w1")] == [pid]
    done = bench(tb, tmp_path, *REPORT_PINS, tag="follow")
    assert done.returncode == 0, out_of(done)
    st = state(tb, "w1")
    assert st["runner_pid"] == pid and st["status"] == "done"
    assert [i["attempts"] for i in st["items"]] == [1, 1, 1]
    assert_results(tb, "w1", REPORT_QUEUES["w1"])


# ---------------------------------------------------------------- 8. fab stop
def test_fab_stop_stops_runners_and_servers_cleanly_and_bench_resumes(tb, tmp_path):
    first = bench(tb, tmp_path, *REPORT_PINS, "--no-wait", tag="first")
    assert first.returncode == 0, out_of(first)
    client = wait_for(lambda: item_status(tb, "w1", "vanilla", ["done"])
                      and item_status(tb, "w1", "ngram", ["benchmarking"])
                      and gpu_used(tb, "w1") >= GPU_FREE_MIB
                      and [pid for pid, a in procs(tb, "w1") if " bench serve " in f" {a} "],
                      120, "w1's ngram engine holding the GPU and its bench client running")
    assert vllm_procs(tb, "w1")
    before = mtimes(tb, "w1", result_names(["vanilla"]))
    # ngram's bench client is held (SIGSTOP) until the runner has fab stop's SIGTERM: at load ~30 the rest
    # of the item (a few seconds) once ended before fab stop reached the runner, and ngram was done
    with frozen(client), fab_in_background(tb, tmp_path, "stop", "--plan", str(FAST), tag="stop") as stop:
        wait_for(lambda: "stopping after cleaning up the current server" in
                 host_sh(tb, "w1", f"cat {run_dir('w1')}/runner.log").stdout, 120, "the runner to get SIGTERM")
        thaw(client)
        rc = stop.wait(timeout=120)
    assert rc == 0, (tmp_path / "bench-stop.log").read_text()[-3000:]
    st = state(tb, "w1")
    assert st["status"] == "stopped"
    ng = items(st)["ngram"]
    assert ng["status"] == "pending" and "SIGTERM" in ng["error"]
    for h in ("w1", "w2"):
        assert_idle(tb, h)
    assert "stopping server" in host_sh(tb, "w1", f"cat {run_dir('w1')}/runner.log").stdout

    again = bench(tb, tmp_path, *REPORT_PINS, tag="again")
    assert again.returncode == 0, out_of(again)
    st = state(tb, "w1")
    assert [(i["name"], i["status"], i["attempts"]) for i in st["items"]] == \
        [("vanilla", "done", 1), ("ngram", "done", 2), ("ngram_improved", "done", 1)]
    assert mtimes(tb, "w1", list(before)) == before
    for host, queue in REPORT_QUEUES.items():
        assert_results(tb, host, queue)
        assert_idle(tb, host)


# ---------------------------------------------------------------- 9. --check
def test_check_prints_queues_and_commands_and_starts_nothing(tb, tmp_path):
    out = bench(tb, tmp_path, *REPORT_PINS, "--check", tag="check", timeout=120)
    assert out.returncode == 0, out_of(out)
    text = out.stdout
    for host, queue in REPORT_QUEUES.items():
        assert f"{host}: " + " -> ".join(queue) in text
        for cfg in queue:
            assert f"--result-filename {cfg}_conc1.json" in text and f"--result-filename {cfg}_conc16.json" in text
            assert f"node={host} config={cfg}" in text
    assert text.count("/bin/vllm serve @MODEL@") == 5  # one server per item
    assert "eagle3" in text and "--speculative-config" in text
    for h in ("w1", "w2"):
        assert host_sh(tb, h, f"ls -d {WORK}").returncode != 0, "check mode created the work dir"
        assert runner_procs(tb, h) == [] and vllm_procs(tb, h) == []


# ---------------------------------------------------------------- 10. two fab bench at once
def test_two_fab_bench_started_at_once_follow_the_same_runners(tb, tmp_path):
    with bench_in_background(tb, tmp_path, *REPORT_PINS, tag="a") as a, \
            bench_in_background(tb, tmp_path, *REPORT_PINS, tag="b") as b:
        rcs = [a.wait(timeout=240), b.wait(timeout=240)]
    logs = [(tmp_path / f"bench-{t}.log").read_text() for t in ("a", "b")]
    assert rcs == [0, 0], [lg[-3000:] for lg in logs]
    for lg in logs:
        assert "the runner is not running" not in lg, lg[-3000:]
    for host in REPORT_QUEUES:  # each host: one fab started the runner, the other followed that one
        said = sorted(e["message"] for t in ("a", "b") for e in events(tmp_path / f"runs-{t}")
                      if e.get("step") == "start runner" and e["host"] == host)
        print(host, said)
        assert len(said) == 2 and said[1].startswith("started runner pid "), said
        pid = said[1].split()[3]
        assert said[0] in (f"following runner pid {pid} (another fab bench started it just now)",
                           f"reattached to runner pid {pid}"), said
    for host, queue in REPORT_QUEUES.items():
        st = state(tb, host)
        assert st["status"] == "done"
        assert [(i["name"], i["status"], i["attempts"]) for i in st["items"]] == [(n, "done", 1) for n in queue]
        # one runner worked the queue; the other fab followed it
        runs = host_sh(tb, host, f"grep -c ' runner pid ' {run_dir(host)}/runner.log").stdout.strip()
        assert runs == "1", host_sh(tb, host, f"cat {run_dir(host)}/runner.log").stdout
        assert_results(tb, host, queue)
        assert_idle(tb, host)


# ---------------------------------------------------------------- 11. full disk
def test_a_full_disk_ends_the_runner_and_its_server_and_says_where(tb, tmp_path):
    d = run_dir("w1")
    assert host_sh(tb, "w1", f"mkdir -p {d} && mount -t tmpfs -o size=8m sf-full {d}").returncode == 0
    # 512 output tokens: a concurrency-1 run lasts a few seconds, time to fill the disk under it
    plan = plan_variant(tmp_path, lambda doc: doc["benchmark"].update(output_len=512))
    with bench_in_background(tb, tmp_path, *REPORT_PINS, plan=plan) as p:
        wait_for(lambda: item_status(tb, "w1", "vanilla", ["benchmarking"]), 120, "w1 benchmarking vanilla")
        host_sh(tb, "w1", f"dd if=/dev/zero of={d}/filler bs=64k 2>/dev/null")
        rc = p.wait(timeout=180)
    log = (tmp_path / "bench-bg.log").read_text()
    assert rc == 2, log[-3000:]
    assert f"no space left on {d}" in " ".join(log.split()), log[-3000:]
    st = state(tb, "w1")
    assert st["status"] == "failed" and st["error"].startswith(f"no space left on {d}"), st
    assert items(st)["vanilla"]["status"] == "failed"
    assert_idle(tb, "w1")  # no runner, no server, no engine holding the GPU
    assert state(tb, "w2")["status"] == "done"  # the other host went on


# ---------------------------------------------------------------- the drafter against the model
def test_a_4096_eagle3_drafter_for_the_5120_model_is_refused_before_a_server_starts(tb, tmp_path):
    """The testbed's drafter is in the speculators layout (testbed/seed.py); a copy of it whose draft
    layer is 4096 wide is refused on w2 before its server starts, naming both sizes; a copy trained for
    another verifier runs, and the collected report warns (field report §1.3)."""
    spec = json.loads(host_sh(tb, "w2", "cat /mnt/fabrix/models/Qwen3-32B-speculator.eagle3/config.json").stdout)
    assert spec["speculators_config"]["verifier"]["name_or_path"] == "Qwen/Qwen3-32B"
    narrow = json.loads(json.dumps(spec))
    narrow["transformer_layer_config"]["hidden_size"] = 4096
    other = json.loads(json.dumps(spec))
    other["speculators_config"]["verifier"]["name_or_path"] = "Qwen/Qwen3-14B"
    root = f"{WORK}/drafters"   # under the campaigns folder: reset removes it
    for name, cfg in (("narrow", narrow), ("other", other)):
        p = host_sh(tb, "w2", f"mkdir -p {root}/{name} && printf %s {shlex.quote(json.dumps(cfg))} "
                              f"> {root}/{name}/config.json")
        assert p.returncode == 0, p.stderr

    def edit(doc):
        doc["configurations"] = [c for c in doc["configurations"] if c["name"] == "vanilla"] + [
            {"name": n, "speculative_config": {"method": "eagle3", "model": f"{root}/{n}", "num_speculative_tokens": 3}}
            for n in ("narrow", "other")]
    plan = plan_variant(tmp_path, edit)
    out = bench(tb, tmp_path, "--assign", "narrow=w2", "--assign", "other=w2", plan=plan)
    assert out.returncode == 2, out_of(out)   # a host had a failed item
    it = items(state(tb, "w2"))
    assert it["narrow"]["status"] == "failed" and it["other"]["status"] == "done", it
    err = it["narrow"]["error"]   # the model: the worker's first readable candidate
    assert err.startswith(f"the drafter {root}/narrow was trained for hidden size 4096 (hidden_size), the model /mnt/") \
        and err.endswith("Qwen3-32B has hidden size 5120; nothing was started"), err
    assert not host_sh(tb, "w2", f"ls {run_dir('w2')}/narrow.server.log 2>/dev/null").stdout.strip()
    coll = fab("collect", "--plan", str(plan), "--results", str(tmp_path / "results"), inventory=inventory_of(tb),
               runs=tmp_path / "runs-collect")
    md = (tmp_path / "results" / CAMPAIGN / "report.md").read_text()
    assert "## Drafter checked against the model" in md, out_of(coll)
    assert (f"Drafter: other on w2: the drafter {root}/other was trained for verifier 'Qwen/Qwen3-14B', the served "
            "model is 'Qwen3-32B'") in md


# ---------------------------------------------------------------- the user's own prompts
def test_a_campaign_on_a_custom_jsonl_runs_end_to_end(tb, tmp_path):
    """dataset_name: custom (the report's follow-up 3 on the user's own file): fab bench places the
    bastion's JSONL on every worker, the simulated vLLM's bench reads it as vLLM's CustomDataset, in
    file order; fab collect reports it."""
    sample = PROJECT / "datasets" / "sample" / "summarize-rag.jsonl"

    def edit(doc):
        doc["benchmark"].update(dataset_name="custom", dataset_path=str(sample))
        doc["configurations"] = [c for c in doc["configurations"] if c["name"] in ("vanilla", "ngram_improved")]
    plan = plan_variant(tmp_path, edit)
    out = bench(tb, tmp_path, "--assign", "ngram_improved=w1", plan=plan)
    assert out.returncode == 0, out_of(out)
    assert_results(tb, "w1", ["vanilla", "ngram_improved"])
    assert_results(tb, "w2", ["vanilla"])
    # the file has no `turns`: read as spec_bench, the bench would have failed ("must contain a 'turns' column")
    r = host_json(tb, "w1", f"{run_dir('w1')}/ngram_improved_conc1.json")
    assert len(r["input_lens"]) == 4 and all(n > 50 for n in r["input_lens"])   # the documents, templated
    spec = host_json(tb, "w1", f"{run_dir('w1')}/run.json")
    assert {i["client"]["dataset_name"] for i in spec["items"]} == {"custom"}
    coll = fab("collect", "--plan", str(plan), "--results", str(tmp_path / "results"), inventory=inventory_of(tb),
               runs=tmp_path / "runs-collect")
    assert coll.returncode == 0, out_of(coll)
    assert (tmp_path / "results" / CAMPAIGN / "report.md").is_file()


def test_a_speed_bench_campaign_with_category_cells_runs_end_to_end(tb, tmp_path):
    """dataset_name: speed_bench on the project's SPEED-Bench-format sample: fab bench places the subset's
    file on every worker, the simulated bench reads its folder as vLLM's SpeedBench does (<subset>.jsonl,
    messages[0].content, --speed-bench-category), one bench cell per category; every run record says
    where its prompts were chat-templated; fab collect gives the per-category table."""
    sample = PROJECT / "datasets" / "sample" / "speed-bench" / "qualitative.jsonl"

    def edit(doc):
        doc["benchmark"].update(dataset_name="speed_bench", dataset_path=str(sample),
                                sweep={"category": ["rag", "coding"]})
        doc["configurations"] = [c for c in doc["configurations"] if c["name"] in ("vanilla", "ngram_improved")]
    plan = plan_variant(tmp_path, edit)
    out = bench(tb, tmp_path, "--assign", "ngram_improved=w1", plan=plan, timeout=400)
    assert out.returncode == 0, out_of(out)
    spec = host_json(tb, "w1", f"{run_dir('w1')}/run.json")
    assert {i["client"]["dataset_name"] for i in spec["items"]} == {"speed_bench"}
    cells = [b["cell"] for b in spec["items"][0]["bench"]]
    assert len(cells) == 4 and all("-cat_" in c for c in cells), cells
    texts = {}
    for cell in cells:
        path = f"{run_dir('w1')}/ngram_improved_{cell}.json"
        r = host_json(tb, "w1", path)
        assert r is not None and r["simulated"] is True and r["completed"] == 4, path
        assert cell.endswith("cat_" + r["category"]), (cell, r["category"])
        texts.setdefault(r["category"], set()).add(tuple(r["input_lens"]))
        rec = host_json(tb, "w1", path.removesuffix(".json") + ".record.json")
        assert rec["cell"]["category"] == r["category"] and rec["chat_template"] == "client+server", rec
    assert texts["rag"] != texts["coding"]   # each cell sent its own category's prompts
    coll = fab("collect", "--plan", str(plan), "--results", str(tmp_path / "results"), "--force",
               inventory=inventory_of(tb), runs=tmp_path / "runs-collect")
    assert coll.returncode == 0, out_of(coll)
    md = (tmp_path / "results" / CAMPAIGN / "report.md").read_text()
    assert "## Per Spec-Bench category" in md and "client + server (double)" in md
