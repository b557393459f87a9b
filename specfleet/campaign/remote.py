"""The bastion's view of a worker's runner: read its state, start it, stop it.

The runner runs detached on the worker (setsid, nohup, every stream
redirected), so it survives the SSH connection dropping and `fab` being
interrupted; the bastion only reads state.json and the runner's lock file.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..connection import HostConnection
from ..facts.gpus import GpuTopology, Gpus
from ..facts.runner_state import CampaignFolders, CampaignView, RunnerView, parse_view, view_script
from ..shell import q
from ..step import Change, HostStatus, Status, Step, StepFailed
from ..steps.files import FileContent
from ..worker import layout

if TYPE_CHECKING:
    from .schedule.split import NodeInfo


def view(hc: HostConnection, work_dir: str, campaign: str) -> RunnerView:
    return parse_view(hc.run(view_script(work_dir, campaign, hc.host.name), timeout=30).stdout)


class StartFailed(Exception):
    """The runner could not be started; the message is the host's own reason, in one line."""


def start(hc: HostConnection, python: str, runner: str, spec_path: str, log_path: str) -> int:
    """Start the runner detached, as the login user (it owns the run folder: `RunFolder`); returns its PID.

    The log's redirect is tried first on its own, so a log the login user cannot write fails here with
    the shell's own words instead of a runner that dies unseen."""
    # No `&&` before the `&`: that would background a subshell whose stdout is
    # still this SSH channel, and the command would not return until the runner ends.
    cmd = (f"cd / || exit 1; {{ : >> {q(log_path)}; }} || exit 1; "
           f"setsid nohup {q(python)} -S {q(runner)} --spec {q(spec_path)} "
           f">> {q(log_path)} 2>&1 < /dev/null & echo $!")
    res = hc.run(cmd, timeout=30)
    if res.exited != 0 or not res.stdout.strip().isdigit():
        raise StartFailed(f"could not start the runner as {hc.host.user}: "
                          f"{one_line(res.stderr) or f'exit {res.exited}'}")
    return int(res.stdout.strip())


def one_line(text: str, limit: int = 300) -> str:
    """The last non-blank line of a host's output, printable, at most `limit` characters."""
    last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
    return "".join(c if c.isprintable() else "?" for c in last.strip())[-limit:]


def log_tail(hc: HostConnection, log_path: str) -> str:
    """The last line of the runner's log, or why there is none (never raises: it words a failure)."""
    try:
        res = hc.run(f"tail -c 4096 -- {q(log_path)}", timeout=30)
    except Exception as e:  # noqa: BLE001 - the start already failed; this only words it
        return f"{log_path} not read ({type(e).__name__})"
    if res.exited != 0:
        return one_line(res.stderr) or f"{log_path} not read"
    return one_line(res.stdout) or f"{log_path} is empty"


@dataclass(frozen=True)
class Started(HostStatus):
    """A host's start: its status and message, and the runner to follow (None when none could start)."""

    pid: int | None = None


def start_or_reattach(hc: HostConnection, work_dir: str, campaign: str, python: str, runner: str,
                      resuming: bool = False) -> Started:
    """Follow the host's live runner, else start one on the run spec placed in its run folder."""
    fresh = view(hc, work_dir, campaign)
    if fresh.alive:
        return Started(Status.OK, f"reattached to runner pid {fresh.runner_pid}", pid=fresh.runner_pid)
    d = layout.run_dir(work_dir, campaign, hc.host.name)
    log = f"{d}/{layout.RUNNER_LOG}"
    try:
        pid = start(hc, python, runner, f"{d}/{layout.RUN_SPEC}", log)
    except StartFailed as e:
        return Started(Status.FAILED, str(e))
    holder = settle(hc, pid, work_dir)
    if holder is None:
        return Started(Status.FAILED, f"the runner exited at once: {log_tail(hc, log)} (from {log})")
    if holder != pid:  # another `fab bench` started one at the same instant and won the lock
        return Started(Status.OK, f"following runner pid {holder} (another fab bench started it just now)", pid=holder)
    return Started(Status.CHANGED, f"started runner pid {pid}{' (resuming)' if resuming else ''}", pid=pid)


def settle(hc: HostConnection, pid: int, work_dir: str, wait_s: float = 10) -> int | None:
    """The runner that holds the host's lock once `pid` (just started) has taken it or given up.

    Two `fab bench` started at once each start a runner; one takes the lock, the other exits
    (code 3). Both fab runs then follow the winner. None: `pid` died and no runner holds the lock.
    """
    lock = q(layout.lock_path(work_dir))
    is_runner = "tr '\\0' ' ' < /proc/$1/cmdline 2>/dev/null | grep -q runner.pyz"
    script = (
        f"runner() {{ {is_runner}; }}; "
        f"for i in $(seq {int(wait_s * 5)}); do "
        f"h=$(sed -n 's/^pid=\\([0-9]*\\).*/\\1/p' {lock} 2>/dev/null); "
        f"[ \"$h\" = {pid} ] && {{ echo $h; exit 0; }}; "
        f"if ! runner {pid}; then [ -n \"$h\" ] && runner \"$h\" && {{ echo $h; exit 0; }}; fi; "
        "sleep 0.2; done; "
        f"runner {pid} && echo {pid}; exit 0")
    res = hc.run(script, timeout=wait_s + 30)
    out = res.stdout.split()
    return int(out[-1]) if out and out[-1].isdigit() else None


def stop_campaign(hc: HostConnection, work_dir: str, campaign: str) -> HostStatus:
    """`fab stop` on one host: stop its live runner, if any."""
    v = view(hc, work_dir, campaign)
    if not v.alive:
        return HostStatus(Status.OK, "no runner running")
    stopped = stop(hc, v.runner_pid)
    if stopped is None:
        return HostStatus(Status.FAILED, f"runner pid {v.runner_pid} is another user's, not {hc.host.user}'s "
                                         "(started by another login): stop it as that user")
    if not stopped:
        return HostStatus(Status.FAILED, f"runner pid {v.runner_pid} did not exit within the timeout")
    return HostStatus(Status.CHANGED, f"stopped runner pid {v.runner_pid}")


def stop(hc: HostConnection, pid: int, wait_s: float = 180) -> bool | None:
    """SIGTERM the runner (it stops its server cleanly) and wait for it to exit; None when the login user may not
    signal it (another user's runner: the signal was refused, never read as "already gone")."""
    cmd = (f"kill -TERM {pid} 2>/dev/null || {{ [ -d /proc/{pid} ] && exit 3; exit 0; }}; "
           f"for i in $(seq {int(wait_s * 5)}); do kill -0 {pid} 2>/dev/null || exit 0; sleep 0.2; done; exit 1")
    rc = hc.run(cmd, timeout=wait_s + 30).exited
    return None if rc == 3 else rc == 0


class RunFolder(Step):
    """A campaign's folders on a worker, owned by the login user: the runner runs as that user (never
    under sudo: the benchmark needs no root, and a root runner would leave root-owned results behind),
    so it must write its lock in the work_dir, its log, state and results in the run folder. Made as root
    (the work_dir is under the root-owned specfleet home by default), then handed to the user; a run
    folder an earlier root login left behind is handed over whole (`chown -R`, links not followed)."""

    needs_root = True
    MODE = "0755"

    def __init__(self, user: str, work_dir: str, campaign: str, host: str):
        self.user = user
        self.dirs = (work_dir, posixpath.join(work_dir, campaign),
                     layout.run_dir(work_dir, campaign, host))
        self.lock = layout.lock_path(work_dir)
        self.name = f"run folder {self.dirs[2]} owned by {user}"

    def facts(self) -> dict:
        return {"owners": CampaignFolders(self.user, (*self.dirs, self.lock), self.dirs[2])}

    def decide(self, facts) -> list:
        value = facts["owners"]
        *dirs, lock = value.paths
        for path, got in zip(self.dirs, dirs):
            if got.kind == "link":
                raise StepFailed(f"{path} is a symlink, not a directory (not followed)")
            if got.kind in ("file", "other"):
                raise StepFailed(f"{path} exists and is not a directory")
        if lock.kind not in ("file", "absent"):
            raise StepFailed(f"{self.lock} exists and is not a regular file")
        owner = q(f"{self.user}:")  # `user:` is the user and its login group
        changes = []
        # the work_dir may be a folder of the user's choosing (bench_work_dir): its mode is set only when made here
        keep_mode = {self.dirs[0]} if dirs[0].kind != "absent" else set()
        wrong = [p for p, got in zip(self.dirs, dirs) if got.kind == "absent" or got.owner != self.user
                 or (p not in keep_mode and got.mode.lstrip("0") != self.MODE.lstrip("0"))]
        if wrong:
            paths = " ".join(q(p) for p in wrong)
            moded = " ".join(q(p) for p in wrong if p not in keep_mode)
            changes.append(Change(f"make {', '.join(wrong)} owned by {self.user}, mode {self.MODE}",
                                  f"mkdir -p -- {paths} && chown -- {owner} {paths}"
                                  + (f" && chmod {self.MODE} -- {moded}" if moded else ""),
                                  "\n".join(f"{p}: {got.kind if got.kind == 'absent' else f'{got.owner} {got.mode}'}"
                                            f" -> {self.user}" + ("" if p in keep_mode else f" {self.MODE}")
                                            for p, got in zip(self.dirs, dirs) if p in wrong)))
        if lock.kind == "file" and lock.owner != self.user:
            changes.append(Change(f"hand {self.lock} to {self.user}", f"chown -- {owner} {q(self.lock)}",
                                  f"{self.lock}: {lock.owner} -> {self.user}"))
        if value.foreign:
            changes.append(Change(f"hand everything in {self.dirs[2]} to {self.user}",
                                  f"chown -R -- {owner} {q(self.dirs[2])}",
                                  f"{value.foreign} (and maybe more) not owned by {self.user}"))
        return changes


class RunSpecFile(FileContent):
    """The run spec, written as the login user into the run folder it owns (`RunFolder`)."""

    needs_root = False


@dataclass(frozen=True)
class WorkerRead:
    """What `fab bench` read of one worker: its GPUs as the split's node, and its campaign's state."""

    node: NodeInfo
    view: RunnerView | None


class ReadWorker(Step):
    """Changes nothing: what `fab bench` reads of a worker before the split, in one probe batch:
    its GPUs and topology (the split's slots: `NodeInfo.from_facts`, the inventory's `gpus`
    winning) and its campaign's state (resume, reattach), answered per host by `Fleet.facts`
    (`read`: a `WorkerRead`). A host whose nvidia-smi fails, with no `gpus` in the inventory,
    fails here alone with one line."""

    name = "read GPUs and campaign state"
    needs_root = False

    def __init__(self, host, work_dir: str, campaign: str):
        self.host = host
        self.campaign_view = CampaignView(work_dir, campaign, host.name)

    def facts(self) -> dict:
        return {"gpus": Gpus(), "topology": GpuTopology(), "view": self.campaign_view}

    def node(self, facts) -> NodeInfo:
        from ..plan import PlanError
        from .schedule.split import NodeInfo
        try:
            return NodeInfo.from_facts(self.host.name, self.host.vars, facts["gpus"], facts["topology"])
        except PlanError as e:
            raise StepFailed(str(e)) from None

    def decide(self, facts) -> list:
        self.node(facts)  # a host whose GPUs cannot be told fails here, alone
        return []

    def read(self, facts) -> WorkerRead:
        return WorkerRead(self.node(facts), facts["view"])

    def report(self, facts) -> dict:
        node = self.node(facts)
        return {"gpus": len(node.gpus) or 1, "gpus_source": node.gpus_source,
                "gpu_names": [f"{g['index']}: {g.get('name') or 'unnamed'}"
                              + (f" {g['memory_mib']} MiB" if g.get("memory_mib") else "") for g in node.gpus],
                "gpu_groups": [list(g) for g in node.gpu_groups or []], "groups_source": node.groups_source}
