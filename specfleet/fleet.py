"""Running steps on many hosts at once.

A bounded thread pool runs each host's steps independently: a host that fails
or cannot be reached drops out of the run and the others go on. Per host, the
probes of all pending steps travel in one remote round trip; after a step
changes the host, the remaining steps' facts are gathered again, so a no-op
run costs one round trip per host and play.
"""
from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable

from .connection import CommandTimeout, HostConnection, Unreachable
from .events import EventLog, Redactor
from .inventory import Host
from .shell import ProbeBatch, as_root
from .step import Change, Facts, Status, Step, StepFailed, StepResult

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_FAILED = 2
EXIT_UNREACHABLE = 4  # bit flags: 6 = some failed and some unreachable
EXIT_NOT_MERGED = 8   # collect: the nodes were not equivalent (or nothing valid), nothing merged

StepsFor = Callable[[Host], Iterable[Step]]


class Fleet:
    def __init__(
        self,
        hosts: list[Host],
        *,
        check: bool = False,
        diff: bool = False,
        forks: int = 32,
        serial: bool = False,
        accept_new: bool = False,
        events: EventLog | None = None,
        redact: Redactor | None = None,
        on_result: Callable[[StepResult], None] | None = None,
    ):
        self.hosts = list(hosts)
        self.check = check
        self.diff = diff
        self.workers = 1 if serial else max(1, min(forks, len(self.hosts) or 1))
        self.events = events
        self.redact = redact or Redactor()
        self.on_result = on_result
        self.connections = {h.name: HostConnection(h, accept_new=accept_new) for h in self.hosts}
        self.results: list[StepResult] = []
        self.dropped: dict[str, Status] = {}  # host -> FAILED or UNREACHABLE
        self.warnings: list[str] = []
        self.extra_exit = 0
        self._lock = threading.Lock()

    # -- running ---------------------------------------------------------
    @property
    def active(self) -> list[Host]:
        return [h for h in self.hosts if h.name not in self.dropped]

    def play(self, steps_for: StepsFor, hosts: list[Host] | None = None) -> dict[str, list[StepResult]]:
        """Run each host's steps in order, hosts in parallel. Returns results per host."""
        targets = [h for h in (hosts or self.hosts) if h.name not in self.dropped]
        out: dict[str, list[StepResult]] = {}

        def one(host: Host) -> None:
            out[host.name] = self._host_play(host, list(steps_for(host)))

        self._parallel(one, targets)
        return out

    def each(self, name: str, fn: Callable[[HostConnection], Any], hosts: list[Host] | None = None) -> dict[str, Any]:
        """Run `fn(connection)` per host in parallel; an exception fails that host only.

        `fn` may return a StepResult-like status via (Status, message, data) or any value (ok).
        """
        targets = [h for h in (hosts or self.hosts) if h.name not in self.dropped]
        out: dict[str, Any] = {}

        def one(host: Host) -> None:
            t0 = time.monotonic()
            hc = self.connections[host.name]
            try:
                hc.open()
                value = fn(hc)
            except Unreachable as e:
                self._record(StepResult(host.name, name, Status.UNREACHABLE, message=str(e),
                                        duration=time.monotonic() - t0))
                return
            except (StepFailed, CommandTimeout) as e:
                self._record(StepResult(host.name, name, Status.FAILED, message=str(e),
                                        duration=time.monotonic() - t0))
                return
            status, message, data = Status.OK, "", {}
            if isinstance(value, StepResult):
                value.duration = value.duration or time.monotonic() - t0
                self._record(value)
                out[host.name] = value
                return
            if isinstance(value, tuple) and value and isinstance(value[0], Status):
                status, message, data = (list(value) + ["", {}])[:3]
            out[host.name] = value
            self._record(StepResult(host.name, name, status, message=message, data=data or {},
                                    duration=time.monotonic() - t0))

        self._parallel(one, targets)
        return out

    def _parallel(self, fn: Callable[[Host], None], hosts: list[Host]) -> None:
        if self.workers == 1 or len(hosts) <= 1:
            for h in hosts:
                fn(h)
            return
        with ThreadPoolExecutor(max_workers=min(self.workers, len(hosts))) as pool:
            for f in [pool.submit(fn, h) for h in hosts]:
                f.result()

    # -- one host ----------------------------------------------------------
    def _host_play(self, host: Host, steps: list[Step]) -> list[StepResult]:
        hc = self.connections[host.name]
        done: list[StepResult] = []
        pending = steps
        while pending:
            t0 = time.monotonic()
            try:
                facts = self._gather(hc, pending)
            except Unreachable as e:
                return done + self._drop(host, pending, Status.UNREACHABLE, str(e), time.monotonic() - t0)
            except (CommandTimeout, StepFailed) as e:
                return done + self._drop(host, pending, Status.FAILED, f"gathering facts: {e}", time.monotonic() - t0)
            gather_time = time.monotonic() - t0
            restart = False
            for i, step in enumerate(pending):
                t1 = time.monotonic()
                share = gather_time / len(pending)
                try:
                    changes = step.decide(facts[i])
                    data = step.report(facts[i])
                except StepFailed as e:
                    if self.check and any(d.changed for d in done):
                        # the check may only fail because an earlier change was not made
                        r = StepResult(host.name, step.name, Status.SKIPPED, duration=share,
                                       message=f"cannot tell before the changes above are made ({e})")
                        self._record(r)
                        done.append(r)
                        continue
                    r = StepResult(host.name, step.name, Status.FAILED, message=str(e), duration=share)
                    self._record(r)
                    return done + [r] + self._drop(host, pending[i + 1:], Status.FAILED, None, 0)
                if not changes:
                    r = StepResult(host.name, step.name, Status.OK, data=data,
                                   duration=share + time.monotonic() - t1)
                    self._record(r)
                    done.append(r)
                    continue
                if self.check:
                    r = StepResult(host.name, step.name, Status.CHANGED, changes, data=data,
                                   message="would change (check mode)", duration=share + time.monotonic() - t1)
                    self._record(r)
                    done.append(r)
                    continue
                r = self._apply(hc, step, changes)
                r.duration = share + time.monotonic() - t1
                self._record(r)
                done.append(r)
                if r.status is not Status.CHANGED:
                    return done + self._drop(host, pending[i + 1:], r.status, None, 0)
                pending, restart = pending[i + 1:], True
                break
            if not restart:
                break
        return done

    def _gather(self, hc: HostConnection, steps: list[Step]) -> list[Facts]:
        facts: list[Facts | None] = [s.local_facts() for s in steps]
        remote = [(i, s.probe()) for i, s in enumerate(steps) if facts[i] is None]
        remote = [(i, p) for i, p in remote if p]
        if remote:
            batch = ProbeBatch([p for _, p in remote])
            sudo = hc.host.needs_sudo and any(steps[i].probe_needs_root for i, _ in remote)
            res = hc.run(as_root(batch.script(), sudo=sudo))
            if res.exited != 0 and "sudo" in res.stderr:
                raise StepFailed(f"sudo failed on {hc.host.name}: {res.stderr.strip()[-300:]} "
                                 "(specfleet needs passwordless sudo: `NOPASSWD` for this user)")
            for (i, _), (out, rc) in zip(remote, batch.parse(res.stdout)):
                facts[i] = Facts(out, rc)
        return [f if f is not None else Facts() for f in facts]

    def _apply(self, hc: HostConnection, step: Step, changes: list[Change]) -> StepResult:
        t0 = time.monotonic()
        name, host = step.name, hc.host
        scripts = [c.script for c in changes if c.script]
        try:
            if scripts:
                body = "set -e\n" + "\n".join(scripts)
                res = hc.run(as_root(body, sudo=step.needs_root and host.needs_sudo))
                if res.exited != 0:
                    return StepResult(host.name, name, Status.FAILED, changes,
                                      message=f"exit {res.exited}: {_last_line(res.stderr)}",
                                      stderr_tail=res.stderr[-2000:], duration=time.monotonic() - t0)
            for c in changes:
                if c.local_argv:
                    p = subprocess.run(c.local_argv, capture_output=True, text=True)
                    if p.returncode != 0:
                        return StepResult(host.name, name, Status.FAILED, changes,
                                          message=f"{c.local_argv[0]} exit {p.returncode}: {_last_line(p.stderr)}",
                                          stderr_tail=p.stderr[-2000:], duration=time.monotonic() - t0)
        except Unreachable as e:
            return StepResult(host.name, name, Status.UNREACHABLE, changes, message=str(e),
                              duration=time.monotonic() - t0)
        except CommandTimeout as e:
            return StepResult(host.name, name, Status.FAILED, changes, message=str(e),
                              duration=time.monotonic() - t0)
        return StepResult(host.name, name, Status.CHANGED, changes, duration=time.monotonic() - t0)

    def _drop(self, host: Host, rest: list[Step], status: Status, message: str | None, duration: float):
        """Take a host out of the run; its remaining steps are recorded."""
        out = []
        with self._lock:
            self.dropped.setdefault(host.name, status)
        for j, step in enumerate(rest):
            if message is not None and j == 0:
                r = StepResult(host.name, step.name, status, message=message, duration=duration)
            else:
                r = StepResult(host.name, step.name, Status.SKIPPED, message="host dropped out earlier")
            self._record(r)
            out.append(r)
        return out

    def _record(self, r: StepResult) -> None:
        # masked before any output sees it (console, event log, data a task prints);
        # a change's script is what runs, never shown, and is left as it is
        r.step = self.redact(r.step)
        r.message = self.redact(r.message)
        r.stderr_tail = self.redact(r.stderr_tail)
        for c in r.changes:
            c.summary, c.diff = self.redact(c.summary), self.redact(c.diff)
        r.data = self.redact.data(r.data)
        with self._lock:
            self.results.append(r)
            if r.status in (Status.FAILED, Status.UNREACHABLE):
                self.dropped.setdefault(r.host, r.status)
        if self.events:
            self.events.step(r)
        if self.on_result:
            self.on_result(r)

    def record_local(self, r: StepResult) -> None:
        """A result of work done on the bastion itself (host 'bastion'), counted like any other."""
        self._record(r)

    def record_local_for(self, host: str, step: str, status: Status, message: str = "") -> None:
        """Record a verdict the bastion reached about a host (e.g. a failed queue item)."""
        self._record(StepResult(host, step, status, message=message))

    def not_merged(self, message: str) -> None:
        """collect's verdict: the run ends with EXIT_NOT_MERGED and this message in the recap."""
        self.extra_exit |= EXIT_NOT_MERGED
        self.warn(message)

    def warn(self, message: str) -> None:
        """A problem to show in the recap that does not fail a host (e.g. a duplicate IP)."""
        self.warnings.append(message)
        if self.events:
            self.events.write({"event": "warning", "message": self.redact(message)})

    # -- outcome -----------------------------------------------------------
    def counts(self) -> dict[str, dict[str, int]]:
        names = [h.name for h in self.hosts]
        names += sorted({r.host for r in self.results} - set(names))
        table = {n: {s.value: 0 for s in Status} for n in names}
        for r in self.results:
            table[r.host][r.status.value] += 1
        return table

    def exit_code(self) -> int:
        code = EXIT_OK | self.extra_exit
        for status in self.dropped.values():
            code |= EXIT_FAILED if status is Status.FAILED else EXIT_UNREACHABLE
        return code

    def close(self) -> None:
        for hc in self.connections.values():
            hc.close()


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no error output)"
