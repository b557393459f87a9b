"""Running steps on many hosts at once.

A bounded thread pool runs each host's steps independently: a host that fails
or cannot be reached drops out of the run and the others go on; so does a host
whose work raised anything else (a bug, an OSError): that host fails with one
line, the traceback goes to the event log. Per host, the
probes of all pending steps travel in one remote round trip; after a step
changes the host, the remaining steps' facts are gathered again, so a no-op
run costs one round trip per host and play.
"""
from __future__ import annotations

import queue
import subprocess
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .connection import CommandTimeout, HostConnection, Unreachable
from .errors import UserError
from .events import EventLog, Redactor
from .exits import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, exit_status
from .inventory import Host
from .facts.gather import gather
from .shell import as_root
from .step import Change, HostStatus, Payload, Status, Step, StepFailed, StepResult

StepsFor = Callable[[Host], Iterable[Step]]
_DROPPED = (Status.FAILED, Status.UNREACHABLE)


@dataclass
class HostOutcome:
    """One host's outcome of one `Fleet.each` or `Fleet.play`, kept as a value (as Fabric's GroupResult
    keeps each host's result or exception): ok, changed, failed or unreachable, with what the work
    returned (`each`) and the step results it recorded (`play`)."""

    host: str
    status: Status
    value: Any = None                 # each: what the work returned; facts: what was read; None when it failed
    message: str = ""
    results: list[StepResult] = field(default_factory=list)
    error: Exception | None = None    # each: the exception that failed the host, kept as Fabric keeps it

    @property
    def failed(self) -> bool:
        return self.status in _DROPPED

    @property
    def succeeded(self) -> bool:
        return not self.failed


class Outcomes(dict[str, HostOutcome]):
    """Host name -> its HostOutcome, for every host the call ran on."""

    @property
    def failed(self) -> dict[str, HostOutcome]:
        return {h: o for h, o in self.items() if o.failed}

    @property
    def succeeded(self) -> dict[str, HostOutcome]:
        return {h: o for h, o in self.items() if o.succeeded}

    def values_by_host(self) -> dict[str, Any]:
        """What the work returned on each host where it succeeded."""
        return {h: o.value for h, o in self.succeeded.items()}


def _play_status(results: list[StepResult]) -> Status:
    """A host's status over its steps: the first that dropped it, else changed if any step changed."""
    dropped = next((r.status for r in results if r.status in _DROPPED), None)
    return dropped or (Status.CHANGED if any(r.changed for r in results) else Status.OK)


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
        self.not_ready: dict[str, str] = {}  # host -> why it is reachable but not ready (the recap's result)
        self.extra_exit = 0
        self.current: dict[str, str] = {}  # host -> the step it is working on now (for Ctrl-C)
        self.interrupted = False
        self.interrupt_hints: list[str] = []  # what a task says on Ctrl-C (e.g. bench: the runners go on)
        self._lock = threading.Lock()
        self.commands: dict[str, int] = {}  # host -> remote commands the plays ran (probe batches + changes)

    # -- running ---------------------------------------------------------
    @property
    def active(self) -> list[Host]:
        return [h for h in self.hosts if h.name not in self.dropped]

    def play(self, steps_for: StepsFor, hosts: list[Host] | None = None) -> Outcomes:
        """Run each host's steps in order, hosts in parallel: each host's outcome, its step results in it."""
        targets = [h for h in (hosts or self.hosts) if h.name not in self.dropped]
        out = Outcomes()

        def one(host: Host) -> None:
            try:
                steps = list(steps_for(host))
            except Exception as e:  # e.g. a var this host lacks: this host fails, the others go on
                name = "steps for this host"
                results = [self._result(host.name, name, Status.FAILED, message=self._unexpected(host.name, name, e))]
            else:
                results = self._host_play(host, steps)
                self.current.pop(host.name, None)  # not on Ctrl-C: then `standing` says where it was
            failed = next((r for r in results if r.status in _DROPPED), None)
            out[host.name] = HostOutcome(host.name, _play_status(results), message=failed.message if failed else "",
                                         results=results)

        self._parallel(one, targets)
        return out

    def facts(self, steps_for: StepsFor, hosts: list[Host] | None = None) -> Outcomes:
        """Read each host, hosts in parallel (after pyinfra's `get_facts`): its steps' facts in one round
        trip, as a play gathers them; a check among the steps fails its host alone. Each outcome's value
        is what the host's reading step answered (`Step.read`), None where it failed. Reading steps
        change nothing."""
        out = self.play(steps_for, hosts)
        for o in out.values():
            o.value = None if o.failed else next((r.value for r in o.results if r.value is not None), None)
        return out

    def each(self, name: str, fn: Callable[[HostConnection], Any], hosts: list[Host] | None = None) -> Outcomes:
        """Run `fn(connection)` per host in parallel; an exception fails that host only.

        `fn` returns a HostStatus (its status, message and data are recorded), or any other value
        (that host is ok); either way the value is its HostOutcome's `value`.
        """
        targets = [h for h in (hosts or self.hosts) if h.name not in self.dropped]
        out = Outcomes()

        def one(host: Host) -> None:
            self.current[host.name] = name
            out[host.name] = work(host)
            self.current.pop(host.name, None)  # not on Ctrl-C: then `standing` says where it was

        def work(host: Host) -> HostOutcome:
            t0 = time.monotonic()
            hc = self.connections[host.name]
            value, status, message, data, error = None, Status.OK, "", {}, None
            try:
                hc.open()
                value = fn(hc)
            except Exception as e:  # anything in one host's work fails (or loses) that host only
                status, message = self._failure(host.name, name, e)
                error = e
            else:
                if isinstance(value, HostStatus):
                    status, message, data = value.status, value.message, value.data
            r = self._result(host.name, name, status, message=message, data=data or {}, duration=time.monotonic() - t0)
            return HostOutcome(host.name, status, value, r.message, [r], error)

        self._parallel(one, targets)
        return out

    def _parallel(self, fn: Callable[[Host], None], hosts: list[Host]) -> None:
        """`fn(host)` for each host, `self.workers` at a time.

        Daemon threads, joined in short waits: Ctrl-C reaches the main thread at once, and fab
        exits without waiting for a host's command to end (a pool's threads are joined at exit).
        """
        if self.workers == 1 or len(hosts) <= 1:
            for h in hosts:
                fn(h)
            return
        todo: queue.SimpleQueue[Host] = queue.SimpleQueue()
        for h in hosts:
            todo.put(h)
        errors: list[BaseException] = []

        def worker() -> None:
            while not self.interrupted:
                try:
                    h = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    fn(h)
                except BaseException as e:  # fn records per-host errors itself; this is a bug
                    errors.append(e)
        threads = [threading.Thread(target=worker, daemon=True, name=f"fleet-{i}")
                   for i in range(min(self.workers, len(hosts)))]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.25)
        if errors:
            raise errors[0]

    # -- one host ----------------------------------------------------------
    def _host_play(self, host: Host, steps: list[Step]) -> list[StepResult]:
        hc = self.connections[host.name]
        done: list[StepResult] = []
        pending = steps
        while pending:
            t0 = time.monotonic()
            self.current[host.name] = "gathering facts"
            try:
                facts = self._gather(hc, pending)
            except Exception as e:
                status, why = self._failure(host.name, "gathering facts", e)
                message = why if status is Status.UNREACHABLE else f"gathering facts: {why}"
                return done + self._drop(host, pending, status, message, time.monotonic() - t0)
            gather_time = time.monotonic() - t0
            restart = False
            for i, step in enumerate(pending):
                t1 = time.monotonic()
                share = gather_time / len(pending)
                self.current[host.name] = step.name
                try:
                    if isinstance(facts[i], Exception):  # a fact it needs could not be gathered
                        raise facts[i]
                    changes = step.decide(facts[i])
                    data = step.report(facts[i])
                    value = step.read(facts[i])
                except Exception as e:
                    if not isinstance(e, StepFailed):  # a bug or an OSError on the bastion: one line
                        e = StepFailed(self._unexpected(host.name, step.name, e))
                    if self.check and any(d.changed for d in done):
                        # the check may only fail because an earlier change was not made
                        done.append(self._result(host.name, step.name, Status.SKIPPED, duration=share,
                                                 message=f"cannot tell before the changes above are made ({e})"))
                        continue
                    r = self._result(host.name, step.name, Status.FAILED, message=str(e), duration=share)
                    return done + [r] + self._drop(host, pending[i + 1:], Status.FAILED, None, 0)
                if not changes or self.check:
                    done.append(self._result(host.name, step.name, Status.CHANGED if changes else Status.OK,
                                             changes, data=data, value=value, duration=share + time.monotonic() - t1,
                                             message="would change (check mode)" if changes else ""))
                    continue
                try:
                    status, message, stderr_tail = self._apply(hc, step, changes)
                except Exception as e:  # the connection lost, a timeout, rsync not installed on the bastion
                    (status, message), stderr_tail = self._failure(host.name, step.name, e), ""
                r = self._result(host.name, step.name, status, changes, message=message, stderr_tail=stderr_tail,
                                 duration=share + time.monotonic() - t1)
                done.append(r)
                if r.status is not Status.CHANGED:
                    return done + self._drop(host, pending[i + 1:], r.status, None, 0)
                pending, restart = pending[i + 1:], True
                break
            if not restart:
                break
        return done

    def _gather(self, hc: HostConnection, steps: list[Step]) -> list:
        """Each step's fact values (or the exception that fails that step): one command per host."""
        def run(script: str, root: bool) -> str:
            self._count(hc.host.name)
            res = hc.run(as_root(script, sudo=root and hc.host.needs_sudo))
            if res.exited != 0 and "sudo" in res.stderr:
                # sudo's last line is its refusal ("a password is required"); a warning may come before it
                raise StepFailed(f"sudo failed on {hc.host.name}: {_last_line(res.stderr)[-300:]} "
                                 "(specfleet needs passwordless sudo: `NOPASSWD` for this user)")
            return res.stdout
        return gather(steps, run, diff=self.diff)

    def _apply(self, hc: HostConnection, step: Step, changes: list[Change]) -> tuple[Status, str, str]:
        """Make the changes: (status, message, stderr tail) for the step's result."""
        host = hc.host
        for scripts, payload in _commands(changes):
            body = "set -e\n" + "\n".join(scripts)
            self._count(host.name)
            res = hc.run(as_root(body, sudo=step.needs_root and host.needs_sudo),
                         stdin=payload.chunks() if payload else None)
            if res.exited != 0:
                return Status.FAILED, f"exit {res.exited}: {_last_line(res.stderr)}", res.stderr[-2000:]
        for c in changes:
            if c.local_argv:
                p = subprocess.run(c.local_argv, capture_output=True, text=True)
                if p.returncode != 0:
                    return (Status.FAILED, exit_status(c.local_argv[0], p.returncode)
                            + (f": {_last_line(p.stderr)}" if p.stderr.strip() else ""), p.stderr[-2000:])
        return Status.CHANGED, "", ""

    def _count(self, host: str) -> None:
        with self._lock:
            self.commands[host] = self.commands.get(host, 0) + 1

    def _drop(self, host: Host, rest: list[Step], status: Status, message: str | None, duration: float):
        """Take a host out of the run; its remaining steps are recorded."""
        out = []
        with self._lock:
            self.dropped.setdefault(host.name, status)
        for j, step in enumerate(rest):
            if message is not None and j == 0:
                out.append(self._result(host.name, step.name, status, message=message, duration=duration))
            else:
                out.append(self._result(host.name, step.name, Status.SKIPPED, message="host dropped out earlier"))
        return out

    def _failure(self, host: str, doing: str, e: Exception) -> tuple[Status, str]:
        """What an exception in a host's work makes of it: its status and one line."""
        if isinstance(e, Unreachable):
            return Status.UNREACHABLE, str(e)
        if isinstance(e, (StepFailed, CommandTimeout)):
            return Status.FAILED, str(e)
        return Status.FAILED, self._unexpected(host, doing, e)

    def _unexpected(self, host: str, step: str, e: Exception) -> str:
        """One line for the console and the step's result; the traceback goes to the event log."""
        if isinstance(e, (UserError, StepFailed)):
            line = str(e)
        else:
            line = f"{type(e).__name__}: {e}"
        line = " ".join(line.split())[:400] or type(e).__name__
        if self.events and not self.interrupted:
            self.events.write({"event": "error", "host": host, "step": step, "type": type(e).__name__,
                               "message": self.redact(line),
                               "traceback": self.redact("".join(traceback.format_exception(e)))})
        return line

    def _result(self, host: str, step: str, status: Status, changes: list[Change] | None = None, *,
                message: str = "", stderr_tail: str = "", duration: float = 0.0, data: dict | None = None,
                value: Any = None) -> StepResult:
        """The one place a step result is made: built, masked, recorded (unless after Ctrl-C), returned."""
        r = StepResult(host, step, status, list(changes or ()), message=message, stderr_tail=stderr_tail,
                       duration=duration, data=data or {}, value=value)
        if self.interrupted:  # a thread still finishing after Ctrl-C: the record is already closed
            return r
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
            if r.status in _DROPPED:
                self.dropped.setdefault(r.host, r.status)
        if self.events:
            self.events.step(r)
        if self.on_result:
            self.on_result(r)
        return r

    def record_local_for(self, host: str, step: str, status: Status, message: str = "", **fields) -> StepResult:
        """Record a verdict the bastion reached about a host (e.g. a failed queue item), or the outcome
        of work done on the bastion itself (host 'bastion'), counted like any other result."""
        return self._result(host, step, status, message=message, **fields)

    def verdict(self, code: int, message: str) -> None:
        """A verdict the bastion reached beside the hosts' results (collect's: exits.py names them):
        `code` joins the run's exit code and the message the recap."""
        self.extra_exit |= code
        self.warn(message)

    def warn(self, message: str) -> None:
        """A problem to show in the recap that does not fail a host (e.g. a duplicate IP)."""
        self.warnings.append(message)
        if self.events:
            self.events.write({"event": "warning", "message": self.redact(message)})

    def note_not_ready(self, host: str, message: str) -> None:
        """A host that did not fail but is not ready for a campaign (fab facts: no venv): the recap says
        why instead of 'fine'."""
        self.not_ready[host] = message
        if self.events:
            self.events.write({"event": "not_ready", "host": host, "message": self.redact(message)})

    def interrupt(self) -> None:
        """Ctrl-C: no more work starts, and nothing more is recorded (the threads are left to die)."""
        self.interrupted = True

    def standing(self) -> list[str]:
        """Where each host stands, one line each: what it was doing, else its last result."""
        lines = []
        for h in self.hosts:
            last = next((r for r in reversed(self.results) if r.host == h.name), None)
            if h.name in self.current:
                lines.append(f"{h.name}: interrupted during {self.current[h.name]!r}"
                             + (f" (last done: {last.step!r}, {last.status.value})" if last else ""))
            elif last:
                lines.append(f"{h.name}: {last.step!r} {last.status.value}" + (f": {last.message}" if last.message else ""))
            else:
                lines.append(f"{h.name}: not started")
        return lines

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
        if self.events and not self.interrupted:  # what a run cost each host, in SSH commands
            for host, n in sorted(self.commands.items()):
                self.events.write({"event": "commands", "host": host, "count": n})
        for hc in self.connections.values():
            hc.close()


def _commands(changes: list[Change]) -> list[tuple[list[str], Payload | None]]:
    """The remote commands for a step's changes, in order: consecutive scripts share one command;
    a change with a payload is a command of its own, the payload on its stdin."""
    out: list[tuple[list[str], Payload | None]] = []
    for c in changes:
        if not c.script:
            continue
        if c.payload is None and out and out[-1][1] is None:
            out[-1][0].append(c.script)
        else:
            out.append(([c.script], c.payload))
    return out


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no error output)"
