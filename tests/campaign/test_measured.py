"""Measured durations for the split (schedule/measured.py): a finished campaign's run folders give the
item times the split optimises; the model fills in what was not measured, and the split says which."""
import json

import pytest

from specfleet.campaign.schedule.measured import config_seconds, for_split, makespan_line, measured_makespan
from specfleet.campaign.schedule.split import MODEL_SOURCE, NodeInfo, split
from specfleet.facts.runner_state import RunnerView
from specfleet.plan import PlanError, load_plan

REPORT = load_plan("plans/qwen3-32b.yml")


def stamp(s: int) -> str:
    return f"2026-01-01T00:{s // 60:02d}:{s % 60:02d}Z"


def run_folder(items: list[tuple[str, str | None, str, int, int]]) -> tuple[dict, dict]:
    """(run.json, state.json) of a run folder: items (name, config or None, status, start s, end s)."""
    spec = {"items": [{"name": n, **({"config": c} if c else {})} for n, c, _, _, _ in items]}
    state = {"items": [{"name": n, "status": st, "started_at": stamp(a), "finished_at": stamp(b),
                        "phase": "done" if st == "done" else ""} for n, _, st, a, b in items]}
    return spec, state


def test_a_configuration_counts_once_every_item_of_it_is_done_and_its_repeats_add_up():
    spec, state = run_folder([("vanilla", None, "done", 0, 100), ("ngram@r1", "ngram", "done", 100, 160),
                              ("ngram@r2", "ngram", "done", 160, 230), ("eagle3@r1", "eagle3", "done", 230, 300),
                              ("eagle3@r2", "eagle3", "failed", 300, 310)])
    assert config_seconds(spec, state) == {"vanilla": 100.0, "ngram": 130.0}
    assert config_seconds(None, state) == {} and config_seconds(spec, {"items": "junk"}) == {}


def write(folder, spec, state, host):
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(spec))
    (folder / "state.json").write_text(json.dumps({**state, "host": host}))


def test_an_earlier_campaign_folder_gives_the_split_its_times_and_the_model_the_rest(tmp_path):
    spec, state = run_folder([("vanilla", None, "done", 0, 600), ("ngram", None, "done", 600, 900)])
    write(tmp_path / "old" / "w1", spec, state, "w1")
    spec2, state2 = run_folder([("vanilla", None, "done", 0, 660), ("eagle3", None, "done", 660, 800)])
    write(tmp_path / "old" / "w2", spec2, state2, "w2")
    got = for_split(REPORT, {}, str(tmp_path / "old"))
    assert got["durations"] == {"vanilla": {"item_s": {"w1": 600.0, "w2": 660.0}}, "ngram": {"item_s": {"w1": 300.0}},
                                "eagle3": {"item_s": {"w2": 140.0}}}
    assert got["source"].startswith("measured for 3 of 4 configurations (from ") and "the other 1: the duration model" \
        in got["source"]
    nodes = [NodeInfo("w1"), NodeInfo("w2"), NodeInfo("w3")]
    s = split(REPORT, nodes, **got)
    assert s.durations["vanilla"] == {"w1": 600.0, "w2": 660.0, "w3": 630.0}   # w3 ran nothing: the mean
    assert s.durations["ngram"] == dict.fromkeys(("w1", "w2", "w3"), 300.0)
    assert s.durations["ngram_improved"]["w1"] > 1000   # not measured: the model's NFS load and benchmark
    model = split(REPORT, nodes)
    assert model.source == MODEL_SOURCE and model.durations["ngram"]["w1"] != 300.0


def test_the_workers_run_folders_of_an_earlier_plan_count_and_a_folder_without_runs_is_refused(tmp_path):
    spec, state = run_folder([("vanilla", None, "done", 0, 50), ("ngram", None, "done", 50, 80)])
    got = for_split(REPORT, {"w1": RunnerView(spec={**spec, "plan_hash": "0ld"}, state=state), "w2": RunnerView()})
    assert got["durations"] == {"vanilla": {"item_s": {"w1": 50.0}}, "ngram": {"item_s": {"w1": 30.0}}}
    assert "(from this campaign's run folders on the workers)" in got["source"]
    # placed from this very plan: it resumes as placed (its split is not redone on its own times)
    same = {"w1": RunnerView(spec={**spec, "plan_hash": REPORT.plan_hash()}, state=state)}
    assert for_split(REPORT, same) == {"durations": None, "source": None}
    assert for_split(REPORT, {"w2": RunnerView()}) == {"durations": None, "source": None}
    (tmp_path / "empty").mkdir()
    with pytest.raises(PlanError, match=r"--durations-from .*empty: no state.json"):
        for_split(REPORT, {}, str(tmp_path / "empty"))


def test_the_measured_makespan_is_the_longest_nodes_first_start_to_last_end_and_says_what_it_left_out():
    _, a = run_folder([("vanilla", None, "done", 10, 70), ("ngram", None, "done", 70, 130)])
    _, b = run_folder([("vanilla", None, "done", 12, 100)])
    b["items"].append({"name": "eagle3", "status": "done", "phase": "done earlier",
                       "started_at": stamp(0), "finished_at": stamp(5)})
    got, how = measured_makespan({"w1": RunnerView(state=a), "w2": RunnerView(state=b)})
    assert got == 120.0 and "1 item(s) done by an earlier run are not in it" in how
    s = split(REPORT, [NodeInfo("w1"), NodeInfo("w2")])
    line = makespan_line(s, {"w1": RunnerView(state=a)})
    assert line.startswith(f"makespan: predicted {s.makespan_s / 60:.1f} min") and "measured 2.0 min = 120 s" in line
    assert "not measured" in makespan_line(s, {"w1": RunnerView()}).split("; measured ")[1]
