"""Following the runners (specfleet.campaign.follow) as a sequence of views: no SSH, no clock.

The same situations run for real on the testbed in tests/e2e/test_bench.py and test_faults.py
(reboot, dropped SSH, killed runner); here each reading and its answer is spelled out."""
import base64

import pytest

from specfleet.campaign.follow import DEAD_GRACE_S, HEARTBEAT_S, REBOOTED, Fail, Follow, Say, follow, progress_line
from specfleet.facts.runner_state import RunnerView, parse_view
from specfleet.campaign.spec import RunnerBusy, resumed
from specfleet.connection import Unreachable
from specfleet.step import Status

RUN_DIR = "/home/u/specfleet/campaigns/c/w1"


def state(status="running", current="ngram", items=(("vanilla", "done"), ("ngram", "benchmarking")),
          runner_pid=100, boot="boot-A", errors=None):
    errors = errors or {}
    return {"status": status, "current": current, "runner_pid": runner_pid, "boot": boot,
            "items": [{"name": n, "status": s, "phase": "bench concurrency 1" if s == "benchmarking" else "",
                       "error": errors.get(n)} for n, s in items]}


def running(**kw):
    return RunnerView(state=state(**kw), runner_pid=100, alive=True, boot="boot-A")


def says(actions):
    return [a.text for a in actions if isinstance(a, Say)]


def fails(actions):
    return [(a.host, a.step, a.message) for a in actions if isinstance(a, Fail)]


def test_a_queue_followed_to_its_end():
    f = Follow(runners={"w1": 100})
    assert says(f.read("w1", running(), 0.0, RUN_DIR)) == [
        "w1: ngram: benchmarking (bench concurrency 1) | done 1, failed 0, left 1"]
    assert f.read("w1", running(), 2.0, RUN_DIR) == []  # nothing new: nothing printed
    assert not f.all_finished(["w1"])
    end = RunnerView(state=state("done", None, (("vanilla", "done"), ("ngram", "done"))), alive=False, boot="boot-A")
    assert says(f.read("w1", end, 4.0, RUN_DIR)) == ["w1: done | done 2, failed 0, left 0"]
    assert f.all_finished(["w1"])
    assert f.verdicts() == []


def test_an_earlier_runners_finished_state_ends_nothing():
    """Until the runner this run started (pid 200) writes its state, the old runner's 'done' is stale."""
    f = Follow(runners={"w1": 200})
    old = RunnerView(state=state("done", None, runner_pid=100), alive=True, runner_pid=200, boot="boot-A")
    f.read("w1", old, 0.0, RUN_DIR)
    assert not f.all_finished(["w1"])
    new = RunnerView(state=state("done", None, runner_pid=200), alive=False, boot="boot-A")
    f.read("w1", new, 1.0, RUN_DIR)
    assert f.all_finished(["w1"])


def test_dropped_ssh_is_retried_and_said_once():
    f = Follow()
    f.read("w1", running(), 0.0, RUN_DIR)
    lost = [f.lost("w1", "Connection reset by peer") for _ in range(3)]
    assert [says(a) for a in lost] == [["w1: connection lost (Connection reset by peer); retrying"], [], []]
    assert all(a.lost for a in lost[0])
    assert not f.gave_up  # a lost connection never gives up on a host
    back = f.read("w1", running(), 60.0, RUN_DIR)  # readable again: its progress is printed again
    assert says(back) == ["w1: ngram: benchmarking (bench concurrency 1) | done 1, failed 0, left 1"]
    assert fails(back) == []


def test_a_stalled_runner_is_given_up_after_the_grace():
    """The runner is gone (killed), its queue unfinished: followed for DEAD_GRACE_S, then failed."""
    f = Follow()
    dead = RunnerView(state=state(), alive=False, runner_pid=100, boot="boot-A")
    first = f.read("w1", dead, 100.0, RUN_DIR)
    assert says(first) == ["w1: ngram: benchmarking (bench concurrency 1) | done 1, failed 0, left 1 "
                           "[runner dead: run `fab bench` again to resume]"]
    assert fails(f.read("w1", dead, 100.0 + DEAD_GRACE_S - 1, RUN_DIR)) == []
    gone = f.read("w1", dead, 100.0 + DEAD_GRACE_S, RUN_DIR)
    assert fails(gone) == [("w1", "follow runner", "the runner is not running and its queue is unfinished "
                            f"(killed, or the host rebooted? see {RUN_DIR}/runner.log): run `fab bench` again "
                            "to resume")]
    assert f.gave_up == {"w1"} and f.all_finished(["w1"])
    assert fails(f.verdicts()) == []  # not failed twice


def test_a_runner_seen_alive_again_restarts_the_grace():
    f = Follow()
    dead = RunnerView(state=state(), alive=False, boot="boot-A")
    f.read("w1", dead, 0.0, RUN_DIR)
    f.read("w1", running(), DEAD_GRACE_S - 1, RUN_DIR)
    assert fails(f.read("w1", dead, DEAD_GRACE_S + 1, RUN_DIR)) == []  # dead for 2 s only


def test_a_rebooted_worker_says_provision_first():
    """A reboot's shutdown stops the runner 'cleanly' (stopped): finished, but its queue is not."""
    f = Follow()
    stopped = RunnerView(state=state("stopped", None, (("vanilla", "done"), ("ngram", "pending"))),
                         alive=False, boot="boot-B")
    assert stopped.rebooted
    assert fails(f.read("w1", stopped, 0.0, RUN_DIR)) == []
    assert f.all_finished(["w1"])
    assert fails(f.verdicts()) == [("w1", "follow runner", REBOOTED)]


def test_a_rebooted_worker_whose_runner_died_unrecorded():
    """Killed by the reboot before it could write 'stopped': the grace ends with the reboot hint."""
    f = Follow()
    gone = RunnerView(state=state(), alive=False, boot="boot-B")
    f.read("w1", gone, 0.0, RUN_DIR)
    assert fails(f.read("w1", gone, DEAD_GRACE_S, RUN_DIR)) == [("w1", "follow runner", REBOOTED)]
    assert fails(f.verdicts()) == []


def test_failed_items_are_recorded_at_the_end():
    f = Follow()
    end = RunnerView(state=state("failed", None, (("vanilla", "done"), ("eagle3", "failed")),
                                 errors={"eagle3": "vllm serve exited with code 1"}), alive=False, boot="boot-A")
    f.read("w1", end, 0.0, RUN_DIR)
    assert fails(f.verdicts()) == [("w1", "item eagle3", "vllm serve exited with code 1")]


def test_progress_before_the_runner_wrote_its_state():
    assert progress_line("w2", RunnerView(alive=True, runner_pid=7)) == "w2: runner starting (pid 7)"


def test_status_says_no_runner_dead_starting_or_running_as_it_is():
    """`fab status` said "runner starting" for a host where no runner ran, even one the bench never placed
    (issue 37): each state is named as it is, a dead runner with the last line of its log."""
    assert progress_line("w2", RunnerView()) == "w2: no runner (this campaign was not placed here)"
    dead = RunnerView(spec={"name": "c", "items": []}, log_tail="PermissionError: [Errno 13] Permission denied")
    assert progress_line("w1", dead) == ("w1: runner dead before its first state (never started, or exited at "
                                         "once) (runner.log: PermissionError: [Errno 13] Permission denied)")
    dead_midway = RunnerView(state=state(), alive=False, runner_pid=100, log_tail="Killed")
    assert progress_line("w1", dead_midway).endswith("[runner dead (runner.log: Killed): run `fab bench` again "
                                                     "to resume]")
    live = RunnerView(state=state(), alive=True, runner_pid=100)
    assert progress_line("w1", live) == "w1: ngram: benchmarking (bench concurrency 1) | done 1, failed 0, left 1"


def test_the_view_reads_the_last_line_of_the_runner_log():
    sections = ["", "", "", "", "boot-A\n", "started\nTraceback ...\nPermissionError: denied \x1b[31m\n\n"]
    v = parse_view("".join(base64.b64encode(s.encode()).decode() + "\n" for s in sections))
    assert v.log_tail == "PermissionError: denied ?[31m" and not v.alive and v.spec is None


def view_of(state_text: str, spec_text: str = "") -> RunnerView:
    """A live runner's view as the bastion reads it over SSH (parse_view of the probe's sections)."""
    sections = [spec_text, state_text, "100\nALIVE\n", "vanilla\n", "boot-A\n"]
    return parse_view("".join(base64.b64encode(s.encode()).decode() + "\n" for s in sections))


@pytest.mark.parametrize("items", ['null', '5', '["x"]', '[{"name": "vanilla"}]', '[{"name": ["a"], "status": "done"}]',
                                   '[{"name": "vanilla", "status": "failed", "error": 5}]'])
def test_a_state_json_of_another_shape_is_one_line_and_following_goes_on(items):
    """A worker's state.json that parses but is not the runner's shape (fab status, fab bench's follow:
    a TypeError or KeyError stopped every host) is named in one line; nothing of it is trusted."""
    v = view_of('{"status": "running", "runner_pid": 100, "items": %s}' % items)
    line = progress_line("w1", v)
    assert line.startswith("w1: state.json: ") and "items" in line and "not read" in line
    f = Follow(runners={"w1": 100})
    assert says(f.read("w1", v, 0.0, RUN_DIR)) == [line]
    assert v.counts() == (0, 0, 0) and fails(f.verdicts()) == []


@pytest.mark.parametrize("text, why", [
    ('{"status": "running", "runner_pid": 100}', "state.json: no items: not read"),
    ("[" * 100_000 + "]" * 100_000, "state.json: JSON nested 100000 levels deep"),
    ('{"items": [' * 20 + "]}" * 20, "state.json: items[0] has no name"),
    ("[]", "state.json: list, not an object: not read"),
    ("{not json", "state.json: not JSON")])
def test_a_state_json_without_items_or_hostile_is_named_not_a_crash(text, why):
    """fab bench's follow and fab status (KeyError: 'items', exit 70) on a state.json without items
    or a nesting bomb: one line naming the file and why, never "runner starting" as if it were absent."""
    v = view_of(text)
    assert v.state is None
    line = progress_line("w1", v)
    assert line.startswith(f"w1: {why}"), line
    f = Follow(runners={"w1": 100})
    assert says(f.read("w1", v, 0.0, RUN_DIR)) == [line]
    assert v.counts() == (0, 0, 0)


def test_a_state_json_not_written_yet_is_no_problem():
    assert view_of("").problems == [] and progress_line("w1", view_of("")) == "w1: runner starting (pid 100)"


class Host:
    def __init__(self, name):
        self.name = name


class Conn:
    def __init__(self, host):
        self.host, self.closed = host, 0

    def close(self):
        self.closed += 1


class FakeFleet:
    """The three things follow() uses of a Fleet: active hosts, their connections, records."""

    def __init__(self, *names):
        self.hosts = [Host(n) for n in names]
        self.connections = {h.name: Conn(h) for h in self.hosts}
        self.records, self.dropped = [], set()

    @property
    def active(self):
        return [h for h in self.hosts if h.name not in self.dropped]

    def record_local_for(self, host, step, status, message=""):
        self.records.append((host, step, status, message))
        if status is Status.FAILED:
            self.dropped.add(host)


class Console:
    def __init__(self):
        self.lines = []

    def print(self, text, markup=True):
        self.lines.append(text)


def test_follow_loop_reads_until_every_host_is_done_or_given_up():
    """w1 drops its SSH once and then finishes; w2's runner is gone: given up after the grace."""
    fleet, console, clock = FakeFleet("w1", "w2"), Console(), [0.0]
    w1 = iter([running(), Unreachable("banner timeout"),
               RunnerView(state=state("done", None, (("vanilla", "done"), ("ngram", "done"))), alive=False)])
    w2_dead = RunnerView(state=state(), alive=False)

    def read(hc):
        if hc.host.name == "w2":
            return w2_dead
        v = next(w1, None) or RunnerView(state=state("done", None, (("vanilla", "done"),)), alive=False)
        if isinstance(v, Exception):
            raise v
        return v

    def sleep(s):
        clock[0] += s

    ended = []
    views = follow(fleet, read, lambda host: f"/w/c/{host.name}", console, poll=5.0,
                   on_end=lambda v: ended.append(sorted(v)), clock=lambda: clock[0], sleep=sleep)
    assert sorted(views) == ["w1", "w2"] and ended == [["w1", "w2"]]
    assert "w1: connection lost (banner timeout); retrying" in console.lines[2]
    assert fleet.connections["w1"].closed == 1
    assert [(h, s) for h, s, _, _ in fleet.records] == [("w2", "follow runner")]
    assert "/w/c/w2/runner.log" in fleet.records[0][3]
    assert clock[0] < DEAD_GRACE_S + 10  # not followed forever


def new_spec():
    """A run spec as fab bench builds it (run_id c-new), and the run.json a worker holds of it (c-old)."""
    from specfleet.campaign import Paths, build_run_spec, load_plan
    spec = build_run_spec(load_plan("plans/demo.yml"), "w1", ["vanilla", "ngram"], Paths(venv="/v", work_dir="/w"),
                          run_id="c-new")
    return spec, {"run_id": "c-old", "plan_hash": spec.plan_hash, "items": [{"name": i.name} for i in spec.items]}


def test_resume_keeps_the_campaigns_identity():
    spec, placed = new_spec()
    assert resumed(spec, placed, None).run_id == "c-old"
    assert resumed(spec, placed, 42).run_id == "c-old"      # its own runner still runs: reattach
    assert resumed(spec, placed, None).items == spec.items
    other = {**placed, "plan_hash": "h2"}
    assert resumed(spec, other, None).run_id == "c-new"     # another plan, nothing runs: replaced
    assert resumed(spec, {**placed, "items": [1, 2]}, None) is spec   # a damaged run.json: replaced
    assert resumed(spec, None, None) is spec
    reordered = {**placed, "items": placed["items"][::-1]}
    try:
        resumed(spec, reordered, 42)
    except RunnerBusy as e:
        assert str(e) == "a runner for another plan or queue is running (pid 42); `fab stop` it first"
    else:
        raise AssertionError("a runner of another queue was replaced")


def test_a_placed_run_spec_without_its_run_id_is_replaced_not_a_crash():
    """run.json on the worker with this plan's hash but no run_id (or not a string), or no items: fab bench
    stopped for every host with a KeyError; now it is placed anew (the done items keep their item_hash,
    so nothing is measured twice), or refused while a runner runs it."""
    spec, good = new_spec()
    for placed in ({"plan_hash": spec.plan_hash, "items": good["items"]},
                   {"run_id": 7, "plan_hash": spec.plan_hash, "items": good["items"]},
                   {"run_id": "c-old", "plan_hash": spec.plan_hash}):
        assert resumed(spec, placed, None) is spec
        with pytest.raises(RunnerBusy):
            resumed(spec, placed, 42)


# ---------------------------------------------------------------- elapsed, ETA, requests (issue 37)
def timed_state(items, current, started="2026-12-06T10:00:00Z", updated="2026-12-06T10:10:00Z"):
    """A runner's state with its time stamps (worker clock, host.now) and item records."""
    return {"status": "running", "current": current, "runner_pid": 100, "boot": "boot-A", "started_at": started,
            "updated_at": updated, "items": items}


def test_progress_shows_requests_elapsed_and_an_eta_corrected_by_what_finished():
    items = [{"name": "vanilla", "status": "done", "phase": "done", "error": None,
              "started_at": "2026-12-06T10:00:00Z", "finished_at": "2026-12-06T10:06:00Z"},   # 6 min, planned 4
             {"name": "ngram", "status": "benchmarking", "error": None, "started_at": "2026-12-06T10:06:00Z",
              "phase": "bench concurrency 16, repeat 1 of 3 (bench run 2 of 6 on this server)",
              "requests": {"done": 34, "of": 80}},
             {"name": "eagle3", "status": "pending", "phase": "", "error": None, "started_at": None}]
    v = RunnerView(state=timed_state(items, "ngram"), runner_pid=100, alive=True, boot="boot-A")
    f = Follow(runners={"w1": 100}, estimates={"w1": {"vanilla": 240.0, "ngram": 400.0, "eagle3": 200.0}})
    [line] = says(f.read("w1", v, 1000.0, RUN_DIR))
    # ngram: 400 s x 1.5 = 600 s, 4 min run of it; eagle3: 200 s x 1.5 = 300 s -> 360 + 300 = 11 min
    assert line == ("w1: ngram: benchmarking (bench concurrency 16, repeat 1 of 3 (bench run 2 of 6 on this server), "
                    "requests 34/80) | done 1, failed 0, left 2, elapsed 10m00s, "
                    "ETA 11m00s (the plan's estimate x1.50, from what has finished)")
    # the next requests and our clock moving on: not printed at every poll ...
    items[1]["requests"] = {"done": 40, "of": 80}
    assert says(f.read("w1", v, 1010.0, RUN_DIR)) == []
    # ... but at least every HEARTBEAT_S, with the time carried forward on the worker's clock
    [later] = says(f.read("w1", v, 1000.0 + HEARTBEAT_S, RUN_DIR))
    assert "requests 40/80" in later and "elapsed 10m30s" in later and "ETA 10m30s" in later, later
    # a new phase is printed at once
    items[1]["phase"] = "bench concurrency 16, repeat 2 of 3 (bench run 4 of 6 on this server)"
    assert len(says(f.read("w1", v, 1000.0 + HEARTBEAT_S + 1, RUN_DIR))) == 1


def test_before_anything_finished_the_eta_is_the_plans_and_an_untimed_item_says_so():
    items = [{"name": "vanilla", "status": "loading", "phase": "", "error": None,
              "started_at": "2026-12-06T10:09:00Z"},
             {"name": "vanilla.r2", "status": "pending", "phase": "", "error": None, "started_at": None}]
    v = RunnerView(state=timed_state(items, "vanilla"), runner_pid=100, alive=True, boot="boot-A")
    [line] = says(Follow(estimates={"w1": {"vanilla": 600.0}}).read("w1", v, 0.0, RUN_DIR))
    # two repeat items share vanilla's 600 s: 300 - 60 s run + 300
    assert line.endswith("elapsed 10m00s, ETA 9m00s (the plan's estimate)"), line
    [line] = says(Follow(estimates={"w1": {"ngram": 1.0}}).read("w1", v, 0.0, RUN_DIR))
    assert "ETA not estimated" in line


def test_a_request_count_of_the_wrong_shape_is_not_shown():
    items = [{"name": "ngram", "status": "benchmarking", "phase": "p", "error": None, "requests": {"done": "x"}}]
    assert "requests" not in progress_line("w1", RunnerView(state=timed_state(items, "ngram"), alive=True))


def test_a_finished_host_is_printed_once_not_at_every_heartbeat():
    items = [{"name": "vanilla", "status": "done", "phase": "done", "error": None,
              "started_at": "2026-12-06T10:00:00Z", "finished_at": "2026-12-06T10:06:00Z"}]
    st = dict(timed_state(items, None), status="done", finished_at="2026-12-06T10:06:00Z")
    v = RunnerView(state=st, runner_pid=None, alive=False, boot="boot-A")
    f = Follow(estimates={"w1": {"vanilla": 240.0}})
    assert says(f.read("w1", v, 0.0, RUN_DIR)) == ["w1: done | done 1, failed 0, left 0, elapsed 6m00s"]
    assert says(f.read("w1", v, 10 * HEARTBEAT_S, RUN_DIR)) == []
