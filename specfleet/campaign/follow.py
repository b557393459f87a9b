"""Following a campaign's runners from the bastion until every one is finished.

`Follow` is the decision part, pure: fed one host's RunnerView (or a lost connection) at a time
with the time it was read, it answers what to print (Say) and what to record (Fail).
tests/campaign/test_follow.py drives it with sequences of views (a rebooted worker, a dropped SSH
connection, a finished queue, a stalled runner). `follow` is the loop around it: it reads
each host through the fleet's connections, prints and records what `Follow` answers.
"""
from __future__ import annotations

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


def progress_line(name: str, v: RunnerView) -> str:
    if not v.state:
        return f"{name}: {'; '.join(v.problems) or 'runner starting'}"
    done, failed, left = v.counts()
    cur = next((i for i in v.state["items"] if i["name"] == v.state.get("current")), None)
    where = f"{cur['name']}: {cur['status']} ({cur.get('phase') or ''})" if cur else v.state.get("status")
    alive = "" if v.alive or v.finished else " [runner not running: run `fab bench` again to resume]"
    return f"{name}: {where} | done {done}, failed {failed}, left {left}{alive}"


class Follow:
    """What following the runners has seen so far, and what each new reading means.

    A host whose runner is gone while its queue is unfinished (runner killed, host rebooted, runner
    that could not start) fails after `grace_s` instead of being followed forever. `runners`
    (host -> runner PID started or reattached to): until that runner has written its own
    state.json, the state there is an earlier runner's, and its "done"/"stopped" ends nothing.
    """

    def __init__(self, runners: dict[str, int] | None = None, grace_s: float = DEAD_GRACE_S):
        self.runners = dict(runners or {})
        self.grace_s = grace_s
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

    def _say(self, host: str, text: str, lost: bool = False) -> list[Say]:
        if self._last.get(host) == text:  # a line is printed when it changes
            return []
        self._last[host] = text
        return [Say(host, text, lost)]

    def lost(self, host: str, error: str) -> list[Say]:
        """The host could not be read this time (SSH dropped, timed out): retried, never fatal."""
        return self._say(host, f"{host}: connection lost ({error}); retrying", lost=True)

    def read(self, host: str, v: RunnerView, now: float, run_dir: str) -> list[Say | Fail]:
        """A new view of `host`'s campaign, read at `now` (monotonic seconds); `run_dir` names the
        folder whose runner.log tells more."""
        self.views[host] = v
        out: list[Say | Fail] = list(self._say(host, progress_line(host, v)))
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
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
           ) -> dict[str, RunnerView]:
    """Read every active host's runner (`read(connection)` -> RunnerView) every `poll` seconds until
    all are finished or given up; print progress on `console`, record failures in `fleet`.
    `run_dir(host)`: the host's run folder, for messages. `on_end(views)` runs before the final
    verdicts are recorded (the campaign table)."""
    f = Follow(runners)

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
