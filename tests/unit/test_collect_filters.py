"""What `fab collect` takes from a worker's run folder: the rsync filters and the finished items,
checked with the local rsync on a folder laid out as the bench runner leaves it. No SSH here
(tests/e2e/test_collect.py runs the same against the testbed)."""
import base64
import json

from specfleet.facts.runner_state import RunnerView, parse_view
from specfleet.collect.fetch import finished_items, wanted
from specfleet.collect.fetch import spec_facts

RUN_FOLDER = {
    # done
    "vanilla.done": "{}", "vanilla_conc8.json": "{}", "vanilla_conc1.json": "{}",
    "vanilla.server.log": "log", "vanilla_conc8.bench.log": "log",
    # running: its concurrency-8 run is finished, concurrency 1 is being written
    "ngram.server.log": "log", "ngram_conc8.json": "{}", "ngram_conc1.json.partial": '{"dur',
    # a name that starts like another config's
    "ngram_improved.done": "{}", "ngram_improved_conc8.json": "{}",
    # changed in the plan and measured again: the old marker is still there
    "eagle3.done": "{}", "eagle3_conc8.json": "{}",
    "state.json": "{}", "run.json": "{}", "runner.log": "log",
}


def test_only_finished_items_files_are_taken(tmp_path):
    src = tmp_path / "w1"
    src.mkdir()
    for name, text in RUN_FOLDER.items():
        (src / name).write_text(text)
    got = {p.name for p in src.iterdir() if wanted(p.name, ["vanilla", "ngram_improved"])}
    assert got == {"vanilla.done", "vanilla_conc8.json", "vanilla_conc1.json", "vanilla.server.log",
                   "ngram_improved.done", "ngram_improved_conc8.json", "state.json", "run.json", "runner.log"}


def test_a_stale_marker_of_an_item_being_rerun_does_not_count():
    state = {"items": [{"name": "vanilla", "status": "done"}, {"name": "ngram", "status": "benchmarking"},
                       {"name": "eagle3", "status": "loading"}, {"name": "x", "status": "failed"}]}
    v = RunnerView(state=json.loads(json.dumps(state)), done_markers=["eagle3", "old", "vanilla", "x"])
    # eagle3 and x have markers from an earlier plan version; "old" is no longer in the queue
    assert finished_items(v) == ["old", "vanilla"]
    assert finished_items(RunnerView(state=None, done_markers=["a", "b"])) == ["a", "b"]
    # a marker's name comes from the worker: a glob in it would widen what is taken
    assert finished_items(RunnerView(state=None, done_markers=["*", "a[b]", "ok"])) == ["ok"]


def test_a_state_json_or_run_json_of_another_shape_leaves_the_done_markers_to_decide():
    """A worker's state.json or run.json that parses but is not the runner's shape (items not a list
    of objects, an item without its name or status) is not read: collect takes the items of the done
    markers, as on a worker without one (was a TypeError that failed the host, nothing collected)."""
    def b64(s):
        return base64.b64encode(s.encode()).decode()
    for state, spec in [('{"items": null}', '{"items": 5}'), ('{"items": [{"name": ["a"], "status": "done"}]}', ""),
                        ('{"items": [{"name": "vanilla"}, "x"]}', '{"items": [{"name": 1}]}')]:
        v = parse_view("".join(b64(s) + "\n" for s in [spec, state, "", "ngram\nvanilla\n", "boot\n"]))
        assert finished_items(v) == ["ngram", "vanilla"]
        assert spec_facts(v.spec) == (None, {})
        assert v.state is None and v.problems and all(p.endswith("not read") for p in v.problems)
