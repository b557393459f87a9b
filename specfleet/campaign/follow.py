"""Following a campaign's runners from the bastion until every one is finished.

`Follow` is the decision part, pure: fed one host's RunnerView (or a lost connection) at a time
with the time it was read, it answers what to print (Say) and what to record (Fail).
tests/campaign/test_follow.py drives it with sequences of views (a rebooted worker, a dropped SSH
connection, a finished queue, a stalled runner). `follow` is the loop around it: it reads
each host through the fleet's connections, prints and records what `Follow` answers.
"""
from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass
from typing import Callable

from ..connection import CommandTimeout, Unreachable
from ..step import Status
from ..worker import layout
from ..facts.runner_state import RunnerView

REBOOTED = ("host rebooted (its runner and server are gone): run `fab provision` (mounts, GPU modules), "
            "then `fab bench` to resume")
DEAD_GRACE_S = 15.0  # a runner not running this long, its queue unfinished: stop following that host
FOLLOW_STEP = "follow runner"
HEARTBEAT_S = 30.0  # a host's line is printed when what it does changes, and with its times at least this often
REPEAT_ITEM = re.compile(r"^(.+)\.r(\d+)$")  # commands.repeat_item_name: <config>.r<K>


@dataclass(frozen=True)
class Say:
    """A line to print: a host's progress, or its connection lost (`lost`, shown highlighted)."""

    host: str
    text: str
    lost: bool = False


@dataclass(frozen=True)
class Fail:
    """A failure to record for a host (a step of its own in the recap)."""

    host: str
    step: str
    message: str


def _requests(cur: dict | None) -> str:
    """The current bench run's finished requests, as the runner counts them from its server's /metrics."""
    r = (cur or {}).get("requests") if (cur or {}).get("status") == "benchmarking" else None
    if isinstance(r, dict) and all(type(r.get(k)) is int for k in ("done", "of")):
        return f", requests {r['done']}/{r['of']}"
    return ""


def progress_line(name: str, v: RunnerView, timing: str = "", requests: bool = True) -> str:
    """One host's campaign in one line, saying only what is true: no runner (nothing placed), runner dead
    (with its log's last line), runner starting (alive, no state yet), running (its current item and
    phase, the requests done in the current bench run, its items done/failed/left, then `timing`:
    elapsed, ETA from Follow.timing), or finished."""
    said = f" ({layout.RUNNER_LOG}: {v.log_tail})" if v.log_tail else ""
    if not v.state:
        if v.problems:
            return f"{name}: {'; '.join(v.problems)}"
        if v.alive:
            return f"{name}: runner starting" + (f" (pid {v.runner_pid})" if v.runner_pid else "")
        if v.spec is None:
            return f"{name}: no runner (this campaign was not placed here)"
        return f"{name}: runner dead before its first state (never started, or exited at once){said}"
    done, failed, left = v.counts()
    cur = next((i for i in v.state["items"] if i["name"] == v.state.get("current")), None)
    where = (f"{cur['name']}: {cur['status']} ({cur.get('phase') or ''}{_requests(cur) if requests else ''})" if cur
             else v.state.get("status"))
    alive = "" if v.alive or v.finished else f" [runner dead{said}: run `fab bench` again to resume]"
    return f"{name}: {where} | done {done}, failed {failed}, left {left}{timing}{alive}"


def _iso(t) -> float | None:
    """The runner's UTC time stamp (host.now) in seconds, None when absent or not one."""
    try:
        return float(calendar.timegm(time.strptime(t, "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return None


def duration(s: float) -> str:
    s = max(0, int(round(s)))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def eta(items: list[dict], estimates: dict[str, float], worker_now: float) -> str:
    """What is left of a queue: the plan's estimate of every unfinished item (the split's, per
    configuration; a configuration's repeat items share it), scaled by how long the finished items took
    against their own estimates, less what the current item has already run."""
    per_config: dict[str, int] = {}
    for i in items:
        per_config[_config(i["name"])] = per_config.get(_config(i["name"]), 0) + 1

    def est(i: dict) -> float | None:
        total = estimates.get(_config(i["name"]))
        return None if total is None else total / per_config[_config(i["name"])]
    took, planned = 0.0, 0.0
    for i in items:
        a, b, e = _iso(i.get("started_at")), _iso(i.get("finished_at")), est(i)
        if i["status"] == "done" and a is not None and b is not None and e:
            took, planned = took + (b - a), planned + e
    open_ = [i for i in items if i["status"] not in ("done", "failed")]
    if not open_:
        return ""
    if any(est(i) is None for i in open_):
        return ", ETA not estimated (an item the plan's split did not time)"
    factor = took / planned if planned else 1.0
    left = 0.0
    for i in open_:
        ran = worker_now - a if (a := _iso(i.get("started_at"))) is not None and i["status"] != "pending" else 0.0
        left += max(0.0, est(i) * factor - ran)
    how = f"the plan's estimate x{factor:.2f}, from what has finished" if planned else "the plan's estimate"
    return f", ETA {duration(left)} ({how})"


def _config(name: str) -> str:
    m = REPEAT_ITEM.match(name)
    return m.group(1) if m else name


class Follow:
    """What following the runners has seen so far, and what each new reading means.

    A host whose runner is gone while its queue is unfinished (runner killed, host rebooted, runner
    that could not start) fails after `grace_s` instead of being followed forever. `runners`
    (host -> runner PID started or reattached to): until that runner has written its own
    state.json, the state there is an earlier runner's, and its "done"/"stopped" ends nothing.
    """

    def __init__(self, runners: dict[str, int] | None = None, grace_s: float = DEAD_GRACE_S,
                 estimates: dict[str, dict[str, float]] | None = None):
        self.runners = dict(runners or {})
        self.grace_s = grace_s
        self.estimates = estimates or {}  # host -> configuration -> the split's estimated seconds
        self._seen: dict[str, tuple] = {}  # host -> (worker's updated_at, our clock when first seen)
        self._printed: dict[str, float] = {}
        self.views: dict[str, RunnerView] = {}
        self.gave_up: set[str] = set()
        self._last: dict[str, str] = {}
        self._dead_since: dict[str, float] = {}

    def finished(self, name: str) -> bool:
        v = self.views.get(name)
        return bool(v) and v.finished and (name not in self.runners
                                           or v.state.get("runner_pid") == self.runners[name])

    def all_finished(self, hosts: list[str]) -> bool:
        return all(self.finished(h) for h in hosts if h not in self.gave_up)

    def _say(self, host: str, text: str, lost: bool = False, extra: str = "", now: float | None = None) -> list[Say]:
        """A line is printed when `text` changes, and (with `extra`, the part that changes every poll:
        requests, elapsed, ETA) at least every HEARTBEAT_S."""
        beat = extra and now is not None and now - self._printed.get(host, now) >= HEARTBEAT_S
        if self._last.get(host) == text and not beat:
            return []
        self._last[host] = text
        self._printed[host] = now if now is not None else self._printed.get(host, 0.0)
        return [Say(host, extra or text, lost)]

    def timing(self, host: str, v: RunnerView, now: float) -> str:
        """Elapsed since the runner started and the ETA, on the worker's own clock (its state's time stamps,
        carried forward by our clock since that state was written: no clock skew between the hosts)."""
        st = v.state or {}
        updated, start = _iso(st.get("updated_at")), _iso(st.get("started_at"))
        if updated is None or start is None:
            return ""
        if self._seen.get(host, (None,))[0] != updated:
            self._seen[host] = (updated, now)
        worker_now = _iso(st.get("finished_at")) or updated + (now - self._seen[host][1])
        est = self.estimates.get(host)
        return (f", elapsed {duration(worker_now - start)}"
                + (eta(st.get("items", []), est, worker_now) if est else ""))

    def lost(self, host: str, error: str) -> list[Say]:
        """The host could not be read this time (SSH dropped, timed out): retried, never fatal."""
        return self._say(host, f"{host}: connection lost ({error}); retrying", lost=True)

    def read(self, host: str, v: RunnerView, now: float, run_dir: str) -> list[Say | Fail]:
        """A new view of `host`'s campaign, read at `now` (monotonic seconds); `run_dir` names the
        folder whose runner.log tells more."""
        self.views[host] = v
        line = progress_line(host, v, requests=False)  # what it does: a change is printed at once
        full = progress_line(host, v, self.timing(host, v, now)) if v.state else line
        out: list[Say | Fail] = list(self._say(host, line, extra=full if full != line else "",
                                               now=None if v.finished else now))  # a finished host: once
        if v.alive or self.finished(host):
            self._dead_since.pop(host, None)
        elif now - self._dead_since.setdefault(host, now) >= self.grace_s:
            self.gave_up.add(host)
            out.append(Fail(host, FOLLOW_STEP, REBOOTED if v.rebooted else (
                "the runner is not running and its queue is unfinished (killed, or the "
                f"host rebooted? see {run_dir}/{layout.RUNNER_LOG}): run `fab bench` again to resume")))
        return out

    def verdicts(self) -> list[Fail]:
        """Once following ends: each failed item, and a reboot that stopped a queue "cleanly"."""
        out = []
        for name, v in self.views.items():
            done, failed, left = v.counts()
            if v.rebooted and left and name not in self.gave_up:  # the shutdown stopped the runner "cleanly"
                out.append(Fail(name, FOLLOW_STEP, REBOOTED))
            for item in (v.state or {}).get("items", []):
                if item["status"] == "failed":
                    out.append(Fail(name, f"item {item['name']}", item.get("error") or "failed"))
        return out


def follow(fleet, read: Callable, run_dir: Callable, console, poll: float,
           runners: dict[str, int] | None = None, on_end: Callable | None = None,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
           estimates: dict[str, dict[str, float]] | None = None) -> dict[str, RunnerView]:
    """Read every active host's runner (`read(connection)` -> RunnerView) every `poll` seconds until
    all are finished or given up; print progress on `console`, record failures in `fleet`.
    `run_dir(host)`: the host's run folder, for messages. `on_end(views)` runs before the final
    verdicts are recorded (the campaign table). `estimates`: host -> configuration -> the split's seconds
    (the ETA)."""
    f = Follow(runners, estimates=estimates)

    def apply(actions) -> None:
        for a in actions:
            if isinstance(a, Fail):
                fleet.record_local_for(a.host, a.step, Status.FAILED, a.message)
            elif a.lost:
                console.print(f"[magenta]{a.text}[/]")
            else:
                console.print(a.text, markup=False)

    while True:
        following = [h for h in fleet.active if h.name not in f.gave_up]
        if not following:
            break
        for host in following:
            hc = fleet.connections[host.name]
            try:
                v = read(hc)
            except (Unreachable, CommandTimeout, OSError) as e:
                hc.close()
                apply(f.lost(host.name, str(e)))
                continue
            apply(f.read(host.name, v, clock(), run_dir(host)))
        if f.all_finished([h.name for h in following]):
            break
        sleep(poll)
    if on_end:
        on_end(f.views)
    apply(f.verdicts())
    return f.views
