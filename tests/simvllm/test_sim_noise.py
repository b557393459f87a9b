"""The simulated engine's run-to-run noise (sim.json `noise`): a speed level drawn per server start,
independent from start to start (issue 23: repeats on their own starts must scatter like real runs,
so that more of them narrow an interval), replayable with `noise_seed`."""

from __future__ import annotations

import json
import math
import statistics
import sys
from types import SimpleNamespace

from simvllm_helpers import SIMVLLM

sys.path.insert(0, str(SIMVLLM))
from vllm import simenv  # noqa: E402
from vllm.engine import Engine  # noqa: E402


def start(tmp_path, **cfg) -> Engine:
    """One server start's engine on a host whose sim.json says cfg (no model: only the clock is used)."""
    path = tmp_path / "sim.json"
    path.write_text(json.dumps(cfg))
    host = simenv.host_config()
    return Engine(None, SimpleNamespace(accepted_per_pos=[]), seed=0, max_num_seqs=1, kv_tokens=1, time_scale=1.0, host=host, log_stats=False)


def test_each_start_draws_its_own_level_with_the_stated_spread(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMVLLM_HOST_CONFIG", str(tmp_path / "sim.json"))
    levels = [start(tmp_path, noise=0.02).level for _ in range(400)]   # the same --seed every time
    assert len(set(levels)) == len(levels)            # not one draw replayed per start
    sd = statistics.stdev(math.log(v) for v in levels)
    assert 0.017 < sd < 0.023, sd                     # 400 draws: the sd's own sd is ~0.0007
    # the mean of n starts narrows as 1/sqrt(n): what makes --gate-runs converge
    means = [statistics.fmean(levels[i:i + 16]) for i in range(0, 400, 16)]
    assert statistics.stdev(means) < sd / 2.5


def test_a_step_takes_the_level_of_its_start(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMVLLM_HOST_CONFIG", str(tmp_path / "sim.json"))
    quiet = start(tmp_path, noise=0.0, speed_factor=0.5)
    assert quiet.level == 1.0 and quiet._step_duration(10.0) == 0.02
    eng = start(tmp_path, noise=0.02)
    steps = [eng._step_duration(10.0) for _ in range(2000)]
    assert abs(statistics.fmean(steps) / (0.01 * eng.level) - 1) < 0.005   # jitter averages away


def test_noise_seed_replays_a_sequence_of_independent_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMVLLM_HOST_CONFIG", str(tmp_path / "sim.json"))
    first = [start(tmp_path, noise=0.02, noise_seed=7).level for _ in range(5)]
    assert len(set(first)) == 5                       # each start its own draw
    assert (tmp_path / "noise-starts").read_text().strip() == "5"
    (tmp_path / "noise-starts").unlink()              # a fresh host: the same sequence again
    assert [start(tmp_path, noise=0.02, noise_seed=7).level for _ in range(5)] == first
    (tmp_path / "noise-starts").unlink()
    assert [start(tmp_path, noise=0.02, noise_seed=8).level for _ in range(5)] != first
