"""The runner's phases timed from outside (watch.py) and the device run's summary."""
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from testbed.realgpu import watch

CUDA_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.26.0-cuda-h200"

EVENTS = [
    {"t": 100.0, "item": "vanilla", "status": "preflight", "phase": "checking"},
    {"t": 121.5, "item": "vanilla", "status": "loading", "phase": "server pid 7"},
    {"t": 265.0, "item": "vanilla", "status": "benchmarking", "phase": ""},
    {"t": 266.0, "item": "vanilla", "status": "benchmarking", "phase": "bench concurrency 1 (run 1/2)"},
    {"t": 300.0, "item": "vanilla", "status": "benchmarking", "phase": "bench concurrency 16 (run 2/2)"},
    {"t": 310.0, "item": "vanilla", "status": "stopping", "phase": "stopping server"},
    {"t": 311.2, "item": "vanilla", "status": "done", "phase": "done"},
    {"t": 311.3, "item": "ngram", "status": "preflight", "phase": "checking"},
]


def test_durations_and_runner_cost():
    d = watch.durations(EVENTS)
    assert d["vanilla"] == {"preflight": 21.5, "loading": 143.5, "benchmarking": 45.0, "stopping": 1.2}
    assert watch.runner_cost(d["vanilla"]) == 22.7
    assert watch.runner_cost(d["ngram"]) is None   # still in its first status


def test_a_preflight_shorter_than_one_poll_counts_as_one_poll():
    """On the H200 a later item's preflight (version and prompt fit cached) took under 0.1 s: the
    watcher saw pending -> loading. It counts as POLL_S, an upper bound, not as unknown."""
    ev = [{"t": 10.0, "item": "ngram", "status": "pending", "phase": ""},
          {"t": 50.0, "item": "ngram", "status": "loading", "phase": "server pid 9"},
          {"t": 120.0, "item": "ngram", "status": "benchmarking", "phase": ""},
          {"t": 160.0, "item": "ngram", "status": "stopping", "phase": ""},
          {"t": 160.6, "item": "ngram", "status": "done", "phase": "done"},
          {"t": 161.0, "item": "eagle3", "status": "pending", "phase": ""}]
    d = watch.durations(ev)
    assert watch.preflight_s(d["ngram"]) == watch.POLL_S
    assert watch.runner_cost(d["ngram"]) == round(watch.POLL_S + 0.6, 2)
    assert watch.preflight_s(d["eagle3"]) is None and watch.runner_cost(d["eagle3"]) is None   # never loaded


def test_watch_records_status_changes(tmp_path):
    state, out = tmp_path / "state.json", tmp_path / "phases.json"
    p = subprocess.Popen([sys.executable, str(Path(watch.__file__)), str(state), str(out)])
    try:
        def recorded() -> list[str]:
            try:
                return [e["status"] for e in json.loads(out.read_text())[str(state)]]
            except (OSError, ValueError, KeyError):
                return []
        for status in ("preflight", "loading", "loading", "done"):
            state.write_text(json.dumps({"items": [{"name": "v", "status": status, "phase": ""}]}))
            # the watcher polls every 0.1 s and saves on a change: wait until it has the change (its start-up
            # at load can take seconds; the bound only ends a hung test); a repeated status is no change, so
            # it gets 4 polls to show that the watcher does not record it twice
            if recorded()[-1:] == [status]:
                time.sleep(0.4)
            end = time.monotonic() + 30
            while time.monotonic() < end and recorded()[-1:] != [status]:
                time.sleep(0.05)
    finally:
        p.terminate()
        p.wait(10)
    events = json.loads(out.read_text())[str(state)]
    assert [e["status"] for e in events] == ["preflight", "loading", "done"]
    assert events[0]["t"] < events[1]["t"] < events[2]["t"]


def test_summary_of_a_real_result_folder(tmp_path):
    work = tmp_path / "work"
    shutil.copytree(CUDA_FIXTURES / "h200-dummy8b", work / "h200-dummy8b")
    sp = str(work / "h200-dummy8b" / "h200" / "state.json")
    (tmp_path / "phases.json").write_text(json.dumps({sp: EVENTS}))
    lines = watch.summary(str(work), str(tmp_path / "phases.json"))
    assert lines[0] == "campaign h200-dummy8b status done vllm 0.26.0 error None"
    assert "runner cost 22.7s (OVER 3s)" in lines[1]
    row = next(ln for ln in lines if ln.strip().startswith("vanilla_conc1.json"))
    assert "193.77" in row and "16" in row
    assert watch.summary(str(tmp_path / "none")) == [f"no runner state under {tmp_path / 'none'}"]
