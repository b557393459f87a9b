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
import signal
import subprocess
import threading
import time
import traceback
from typing import Any, Callable, Iterable

from .connection import CommandTimeout, HostConnection, Unreachable
from .errors import UserError
from .events import EventLog, Redactor
from .inventory import Host
from .facts.gather import gather
from .shell import as_root
from .step import Change, Payload, Status, Step, StepFailed, StepResult

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_FAILED = 2
EXIT_UNREACHABLE = 4  # bit flags: 6 = some failed and some unreachable
EXIT_NOT_MERGED = 8   # collect: the nodes were not equivalent (or nothing valid), nothing merged
EXIT_INCOMPLETE = 16  # collect/report: some planned (configuration, concurrency, node) cell is not merged
EXIT_CRASHED = 70     # specfleet itself failed (a bug): sysexits' EX_SOFTWARE; the traceback is in the log
EXIT_NOT_WRITABLE = 73  # collect/report: the results folder is read-only or not writable (EX_CANTCREAT)
EXIT_DISK_FULL = 74     # collect/report: the bastion's disk is full (ENOSPC/EDQUOT; sysexits' EX_IOERR)
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, what shells report for a process a SIGINT ended

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
        self.current: dict[str, str] = {}  # host -> the step it is working on now (for Ctrl-C)
        self.interrupted = False
        self.interrupt_hints: list[str] = []  # what a task says on Ctrl-C (e.g. bench: the runners go on)
        self._lock = threading.Lock()
        self.commands: dict[str, int] = {}  # host -> remote commands the plays ran (probe batches + changes)

    # -- running ---------------------------------------------------------
    @property
    def active(self) -> list[Host]:
        return [h for h in self.hosts if h.name not in self.dropped]

    def play(self, steps_for: StepsFor, hosts: list[Host] | None = None) -> dict[str, list[StepResult]]:
        """Run each host's steps in order, hosts in parallel. Returns results per host."""
        targets = [h for h in (hosts or self.hosts) if h.name not in self.dropped]
        out: dict[str, list[StepResult]] = {}

        def one(host: Host) -> None:
            try:
                steps = list(steps_for(host))
            except Exception as e:  # e.g. a var this host lacks: this host fails, the others go on
                r = StepResult(host.name, "steps for this host", Status.FAILED,
                               message=self._unexpected(host.name, "steps for this host", e))
                self._record(r)
                out[host.name] = [r]
                return
            out[host.name] = self._host_play(host, steps)
            self.current.pop(host.name, None)  # not on Ctrl-C: then `standing` says where it was

        self._parallel(one, targets)
        return out

    def each(self, name: str, fn: Callable[[HostConnection], Any], hosts: list[Host] | None = None) -> dict[str, Any]:
        """Run `fn(connection)` per host in parallel; an exception fails that host only.

        `fn` may return a StepResult-like status via (Status, message, data) or any value (ok).
        """
        targets = [h for h in (hosts or self.hosts) if h.name not in self.dropped]
        out: dict[str, Any] = {}

        def one(host: Host) -> None:
            self.current[host.name] = name
            work(host)
            self.current.pop(host.name, None)  # not on Ctrl-C: then `standing` says where it was

        def work(host: Host) -> None:
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
            except Exception as e:  # anything else in one host's work fails that host only
                self._record(StepResult(host.name, name, Status.FAILED, message=self._unexpected(host.name, name, e),
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
            except Unreachable as e:
                return done + self._drop(host, pending, Status.UNREACHABLE, str(e), time.monotonic() - t0)
            except (CommandTimeout, StepFailed) as e:
                return done + self._drop(host, pending, Status.FAILED, f"gathering facts: {e}", time.monotonic() - t0)
            except Exception as e:
                return done + self._drop(host, pending, Status.FAILED,
                                         f"gathering facts: {self._unexpected(host.name, 'gathering facts', e)}",
                                         time.monotonic() - t0)
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
                except Exception as e:
                    if not isinstance(e, StepFailed):  # a bug or an OSError on the bastion: one line
                        e = StepFailed(self._unexpected(host.name, step.name, e))
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
                try:
                    r = self._apply(hc, step, changes)
                except Exception as e:  # e.g. rsync not installed on the bastion
                    r = StepResult(host.name, step.name, Status.FAILED, changes,
                                   message=self._unexpected(host.name, step.name, e))
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

    def _gather(self, hc: HostConnection, steps: list[Step]) -> list:
        """Each step's fact values (or the exception that fails that step): one command per host."""
        def run(script: str, root: bool) -> str:
            self._count(hc.host.name)
            res = hc.run(as_root(script, sudo=root and hc.host.needs_sudo))
            if res.exited != 0 and "sudo" in res.stderr:
                raise StepFailed(f"sudo failed on {hc.host.name}: {res.stderr.strip()[-300:]} "
                                 "(specfleet needs passwordless sudo: `NOPASSWD` for this user)")
            return res.stdout
        return gather(steps, run, diff=self.diff)

    def _apply(self, hc: HostConnection, step: Step, changes: list[Change]) -> StepResult:
        t0 = time.monotonic()
        name, host = step.name, hc.host
        try:
            for scripts, payload in _commands(changes):
                body = "set -e\n" + "\n".join(scripts)
                self._count(host.name)
                res = hc.run(as_root(body, sudo=step.needs_root and host.needs_sudo),
                             stdin=payload.chunks() if payload else None)
                if res.exited != 0:
                    return StepResult(host.name, name, Status.FAILED, changes,
                                      message=f"exit {res.exited}: {_last_line(res.stderr)}",
                                      stderr_tail=res.stderr[-2000:], duration=time.monotonic() - t0)
            for c in changes:
                if c.local_argv:
                    p = subprocess.run(c.local_argv, capture_output=True, text=True)
                    if p.returncode != 0:
                        return StepResult(host.name, name, Status.FAILED, changes,
                                          message=exit_status(c.local_argv[0], p.returncode)
                                          + (f": {_last_line(p.stderr)}" if p.stderr.strip() else ""),
                                          stderr_tail=p.stderr[-2000:], duration=time.monotonic() - t0)
        except Unreachable as e:
            return StepResult(host.name, name, Status.UNREACHABLE, changes, message=str(e),
                              duration=time.monotonic() - t0)
        except CommandTimeout as e:
            return StepResult(host.name, name, Status.FAILED, changes, message=str(e),
                              duration=time.monotonic() - t0)
        return StepResult(host.name, name, Status.CHANGED, changes, duration=time.monotonic() - t0)

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
                r = StepResult(host.name, step.name, status, message=message, duration=duration)
            else:
                r = StepResult(host.name, step.name, Status.SKIPPED, message="host dropped out earlier")
            self._record(r)
            out.append(r)
        return out

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

    def _record(self, r: StepResult) -> None:
        if self.interrupted:  # a thread still finishing after Ctrl-C: the record is already closed
            return
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

    def incomplete(self, message: str) -> None:
        """collect's verdict: the report lacks planned cells; the run ends with EXIT_INCOMPLETE."""
        self.extra_exit |= EXIT_INCOMPLETE
        self.warn(message)

    def warn(self, message: str) -> None:
        """A problem to show in the recap that does not fail a host (e.g. a duplicate IP)."""
        self.warnings.append(message)
        if self.events:
            self.events.write({"event": "warning", "message": self.redact(message)})

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


def exit_status(program: str, rc: int) -> str:
    """`rsync exit 23`, or for a process a signal ended (subprocess's negative code) `rsync was killed
    by SIGKILL (signal 9)`: never `exit -9`."""
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = "a signal"
        return f"{program} was killed by {name} (signal {-rc}) before it finished"
    return f"{program} exit {rc}"


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no error output)"
