"""The bastion's view of a worker's runner: read its state, start it, stop it.

The runner runs detached on the worker (setsid, nohup, every stream
redirected), so it survives the SSH connection dropping and `fab` being
interrupted; the bastion only reads state.json and the runner's lock file.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..connection import HostConnection
from ..facts.base import Fact
from ..facts.gpus import GpuTopology, Gpus
from ..shell import q, read_sections, sections_script
from ..step import Status, Step, StepFailed
from ..worker import layout



@dataclass
class RunnerView:
    """What one round trip tells about a worker's campaign."""

    spec: dict | None = None
    state: dict | None = None
    runner_pid: int | None = None
    alive: bool = False
    done_markers: list[str] = field(default_factory=list)
    boot: str | None = None  # the host's boot identity now (host.boot_identity)

    @property
    def rebooted(self) -> bool:
        """The host booted since the runner that wrote state.json started."""
        was = (self.state or {}).get("boot")
        return bool(was) and self.boot is not None and was != self.boot

    @property
    def finished(self) -> bool:
        return bool(self.state) and not self.alive and self.state.get("status") in ("done", "failed", "stopped")

    def counts(self) -> tuple[int, int, int]:
        items = (self.state or {}).get("items", [])
        done = sum(i["status"] == "done" for i in items)
        failed = sum(i["status"] == "failed" for i in items)
        return done, failed, len(items) - done - failed


def view_script(work_dir: str, campaign: str, host: str) -> str:
    """The one script that reads a worker's campaign (`view` runs it; `CampaignView` batches it)."""
    d = q(layout.run_dir(work_dir, campaign, host))
    lock = q(layout.lock_path(work_dir))
    return sections_script([
        f"cat {d}/{layout.RUN_SPEC}", f"cat {d}/{layout.STATE}",
        f"pid=$(sed -n 's/^pid=\\([0-9]*\\).*/\\1/p' {lock} 2>/dev/null); echo \"$pid\"; "
        # alive = that PID exists and is a runner (PIDs are reused after a reboot)
        f"[ -n \"$pid\" ] && tr '\\0' ' ' < /proc/$pid/cmdline 2>/dev/null | grep -q runner.pyz && echo ALIVE",
        f"ls {d} 2>/dev/null | sed -n 's/\\{layout.DONE_SUFFIX}$//p'",
        # read, never create, the boot marker (the runner creates it)
        "b=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo '?'); "
        f"t=$(cat {layout.boot_marker('$(id -u)')} 2>/dev/null); echo \"$b${{t:+/$t}}\""])


def parse_view(stdout: str) -> RunnerView:
    parts = read_sections(stdout, 5)
    pid_lines = parts[2].split()
    return RunnerView(spec=_json(parts[0]), state=_json(parts[1]),
                      runner_pid=int(pid_lines[0]) if pid_lines and pid_lines[0].isdigit() else None,
                      alive="ALIVE" in pid_lines, done_markers=parts[3].split(), boot=parts[4].strip() or None)


def view(hc: HostConnection, work_dir: str, campaign: str) -> RunnerView:
    return parse_view(hc.run(view_script(work_dir, campaign, hc.host.name), timeout=30).stdout)


@dataclass(frozen=True)
class CampaignView(Fact):
    """`view` as a host fact: `fab bench` reads it in the same probe batch as the workers' GPUs."""

    work_dir: str
    campaign: str
    host: str

    def command(self) -> str:
        return view_script(self.work_dir, self.campaign, self.host)

    def parse(self, stdout: str, rc: int) -> RunnerView:
        return parse_view(stdout)


def _json(text: str) -> dict | None:
    try:
        return json.loads(text) if text.strip() else None
    except (ValueError, RecursionError):  # RecursionError: a hostile 1e6-deep [[[...]]] (issue 28)
        return None  # a half-written file is never trusted (the runner writes atomically anyway)


def start(hc: HostConnection, python: str, runner: str, spec_path: str, log_path: str) -> int:
    """Start the runner detached; returns its PID."""
    # No `&&` before the `&`: that would background a subshell whose stdout is
    # still this SSH channel, and the command would not return until the runner ends.
    cmd = (f"cd /; setsid nohup {q(python)} -S {q(runner)} --spec {q(spec_path)} "
           f">> {q(log_path)} 2>&1 < /dev/null & echo $!")
    res = hc.run(cmd, timeout=30)
    if res.exited != 0 or not res.stdout.strip().isdigit():
        raise RuntimeError(f"could not start the runner: {res.stderr.strip()[-300:]}")
    return int(res.stdout.strip())


def start_or_reattach(hc: HostConnection, work_dir: str, campaign: str, python: str, runner: str,
                      resuming: bool = False) -> tuple[Status, str, int | None]:
    """Follow the host's live runner, else start one on the run spec placed in its run folder.

    Returns (status, message, PID of the runner to follow or None when none could start)."""
    fresh = view(hc, work_dir, campaign)
    if fresh.alive:
        return Status.OK, f"reattached to runner pid {fresh.runner_pid}", fresh.runner_pid
    d = layout.run_dir(work_dir, campaign, hc.host.name)
    pid = start(hc, python, runner, f"{d}/{layout.RUN_SPEC}", f"{d}/{layout.RUNNER_LOG}")
    holder = settle(hc, pid, work_dir)
    if holder is None:
        return Status.FAILED, f"the runner exited at once: see {d}/{layout.RUNNER_LOG}", None
    if holder != pid:  # another `fab bench` started one at the same instant and won the lock
        return Status.OK, f"following runner pid {holder} (another fab bench started it just now)", holder
    return Status.CHANGED, f"started runner pid {pid}{' (resuming)' if resuming else ''}", pid


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


def stop_campaign(hc: HostConnection, work_dir: str, campaign: str) -> tuple[Status, str]:
    """`fab stop` on one host: stop its live runner, if any."""
    v = view(hc, work_dir, campaign)
    if not v.alive:
        return Status.OK, "no runner running"
    if not stop(hc, v.runner_pid):
        return Status.FAILED, f"runner pid {v.runner_pid} did not exit within the timeout"
    return Status.CHANGED, f"stopped runner pid {v.runner_pid}"


def stop(hc: HostConnection, pid: int, wait_s: float = 180) -> bool:
    """SIGTERM the runner (it stops its server cleanly) and wait for it to exit."""
    cmd = (f"kill -TERM {pid} 2>/dev/null || exit 0; "
           f"for i in $(seq {int(wait_s * 5)}); do kill -0 {pid} 2>/dev/null || exit 0; sleep 0.2; done; exit 1")
    return hc.run(cmd, timeout=wait_s + 30).exited == 0


class ReadWorker(Step):
    """Changes nothing: what `fab bench` reads of a worker before the split, in one probe batch:
    its GPUs and topology (the split's slots: `NodeInfo.from_facts`, the inventory's `gpus`
    winning) and its campaign's state (resume, reattach). A host whose nvidia-smi fails, with no
    `gpus` in the inventory, fails here alone with one line."""

    name = "read GPUs and campaign state"
    needs_root = False

    def __init__(self, host, work_dir: str, campaign: str):
        self.host = host
        self.campaign_view = CampaignView(work_dir, campaign, host.name)
        self.node = None  # NodeInfo, once decided
        self.view: RunnerView | None = None

    def facts(self) -> dict:
        return {"gpus": Gpus(), "topology": GpuTopology(), "view": self.campaign_view}

    def decide(self, facts) -> list:
        from ..plan import PlanError
        from .split import NodeInfo
        try:
            self.node = NodeInfo.from_facts(self.host.name, self.host.vars, facts["gpus"], facts["topology"])
        except PlanError as e:
            raise StepFailed(str(e)) from None
        self.view = facts["view"]
        return []

    def report(self, facts) -> dict:
        return {"gpus": len(self.node.gpus) or 1, "gpus_source": self.node.gpus_source,
                "gpu_names": [f"{g['index']}: {g.get('name') or 'unnamed'}"
                              + (f" {g['memory_mib']} MiB" if g.get("memory_mib") else "") for g in self.node.gpus],
                "gpu_groups": [list(g) for g in self.node.gpu_groups or []], "groups_source": self.node.groups_source}
