"""The bastion's view of a worker's runner: read its state, start it, stop it.

The runner runs detached on the worker (setsid, nohup, every stream
redirected), so it survives the SSH connection dropping and `fab` being
interrupted; the bastion only reads state.json and the runner's lock file.
"""
from __future__ import annotations

from ..connection import HostConnection
from ..facts.gpus import GpuTopology, Gpus
from ..facts.runner_state import CampaignView, RunnerView, parse_view, view_script
from ..shell import q
from ..step import HostStatus, Status, Step, StepFailed
from ..worker import layout


def view(hc: HostConnection, work_dir: str, campaign: str) -> RunnerView:
    return parse_view(hc.run(view_script(work_dir, campaign, hc.host.name), timeout=30).stdout)


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


def stop_campaign(hc: HostConnection, work_dir: str, campaign: str) -> HostStatus:
    """`fab stop` on one host: stop its live runner, if any."""
    v = view(hc, work_dir, campaign)
    if not v.alive:
        return HostStatus(Status.OK, "no runner running")
    if not stop(hc, v.runner_pid):
        return HostStatus(Status.FAILED, f"runner pid {v.runner_pid} did not exit within the timeout")
    return HostStatus(Status.CHANGED, f"stopped runner pid {v.runner_pid}")


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
