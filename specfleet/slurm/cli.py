"""The Slurm commands specfleet runs on the bastion: argv lists (no shell), JSON parsed, never console text,
except sbatch's own one-line refusal, which is passed on naming the inventory field it is about."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass

from ..errors import UserError
from ..scheduler import SlurmScheduler

ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
          "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED")
GRES_GPU_RE = re.compile(r"(?:^|,)gpu(?::[A-Za-z0-9_.-]+)?:(\d+)")


class SlurmError(UserError):
    """A Slurm command refused or failed: one line saying which and why."""


def run(cfg: SlurmScheduler, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"SLURM_CONF": cfg.slurm_conf} if cfg.slurm_conf else {})}
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} is not installed on the bastion (Debian: slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {timeout:.0f} s: is slurmctld reachable "
                         f"(SLURM_CONF={cfg.slurm_conf or 'default'})?") from None


def last_line(p: subprocess.CompletedProcess) -> str:
    lines = [ln.strip() for ln in (p.stderr or p.stdout or "").splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit {p.returncode}"


# node states (base or flag, sinfo's JSON) in which Slurm allocates nothing: sbatch then refuses a job that
# names the node with "Requested node configuration is not available", which names no node
# (NOT_RESPONDING alone is not one: a node just resumed carries it until slurmctld's next ping)
UNUSABLE_STATES = ("DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE", "POWERED_DOWN",
                   "POWERING_DOWN", "POWER_DOWN", "MAINTENANCE")


@dataclass(frozen=True)
class Node:
    name: str
    state: str
    gpus: int
    partitions: tuple[str, ...]
    reason: str = ""  # why the site set the state (scontrol update ... reason=), "" when none

    @property
    def unusable(self) -> list[str]:
        """The parts of its state in which Slurm allocates nothing (empty: usable)."""
        return [s for s in self.state.split("+") if s in UNUSABLE_STATES]


def gres_gpus(gres: str) -> int:
    """'gpu:4', 'gpu:h200:8(S:0-1)', 'gpu:2,nic:1' -> GPU count (0: none)."""
    return sum(int(m) for m in GRES_GPU_RE.findall(gres or ""))


def parse_nodes(doc: dict) -> dict[str, Node]:
    out = {}
    for n in doc.get("nodes", []):
        # 22.05: "state": "idle" and "state_flags": ["DRAIN"]; 23.02 on: "state": ["IDLE", "DRAIN"]
        state = n.get("state")
        parts = [str(s) for s in (state if isinstance(state, list) else [state or "?"])]
        parts += [str(f) for f in n.get("state_flags") or () if str(f).upper() not in map(str.upper, parts)]
        out[n["name"]] = Node(n["name"], "+".join(parts).upper(), gres_gpus(n.get("gres") or ""),
                              tuple(n.get("partitions") or ()), str(n.get("reason") or ""))
    return out


def nodes(cfg: SlurmScheduler) -> dict[str, Node]:
    p = run(cfg, ["sinfo", "--json"])
    if p.returncode != 0:
        raise SlurmError(f"sinfo --json failed: {last_line(p)}")
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise SlurmError("sinfo --json printed no JSON (Slurm 21.08 or later is needed)") from None
    return parse_nodes(doc)


def partition_exists(cfg: SlurmScheduler) -> bool:
    return run(cfg, ["scontrol", "show", "partition", cfg.partition]).returncode == 0


def account_listed(cfg: SlurmScheduler) -> bool | None:
    """Whether Slurm's accounting knows `cfg.account`: True, False, or None when the cluster has no
    accounting (no slurmdbd: sacctmgr refuses, and Slurm then accepts any account name unchecked)."""
    try:
        p = run(cfg, ["sacctmgr", "--parsable2", "--noheader", "show", "account", cfg.account, "format=account"],
                timeout=20)
    except SlurmError:  # not installed, or no slurmdbd answering: nothing to check against
        return None
    return account_verdict(p.returncode, p.stdout, cfg.account or "")


def account_verdict(rc: int, stdout: str, account: str) -> bool | None:
    """sacctmgr's answer (--parsable2 --noheader: one account name per line) -> account_listed's."""
    if rc != 0:
        return None
    return account.lower() in {ln.strip().lower() for ln in stdout.splitlines()}  # Slurm folds accounts to lower case


REFUSED_FIELDS = (  # words of sbatch's refusal -> the inventory field it is about, and that field's value
    ("account", "scheduler.account", lambda cfg: cfg.account),
    ("partition", "scheduler.partition", lambda cfg: cfg.partition),
    ("node", "hosts (the node list)", None),
    ("option", "scheduler.extra_args", lambda cfg: " ".join(cfg.extra_args) or None))


def explain_refusal(inv, cfg: SlurmScheduler, e: SlurmError) -> UserError:
    """sbatch's refusal (its exit and last stderr line) as one line naming the inventory file, the field
    and its value, e.g. Slurm with accounting enforced: 'Invalid account or account/partition combination
    specified' -> field 'scheduler.account' (value 'nosuch')."""
    msg, low = str(e), str(e).lower()
    for word, field, value in REFUSED_FIELDS:
        if word in low:
            v = value(cfg) if value else None
            return UserError(f"{inv.path}: field {field!r}" + (f" (value {v!r})" if v else "") + f": {msg}")
    return UserError(f"{inv.path}: {msg}")


def submit(cfg: SlurmScheduler, argv: list[str]) -> str:
    """sbatch --parsable ... -> the job id."""
    p = run(cfg, argv)
    if p.returncode != 0:
        raise SlurmError(f"sbatch refused the job: {last_line(p)}")
    return p.stdout.strip().split(";")[0]


def job(cfg: SlurmScheduler, job_id: str) -> dict | None:
    """The job as `squeue --json` shows it, in any state (a finished job while slurmctld keeps it: MinJobAge).
    (`scontrol --json` exists only from Slurm 23.02; Debian 12 has 22.05.)"""
    p = run(cfg, ["squeue", "--json", "--states=all", "--jobs", job_id])
    try:
        jobs = json.loads(p.stdout).get("jobs", []) if p.returncode == 0 else []
    except ValueError:
        return None
    return next((j for j in jobs if str(j.get("job_id")) == str(job_id)), None)


def job_state(j: dict | None) -> str:
    if not j:
        return "UNKNOWN"
    s = j.get("job_state")
    return ("+".join(s) if isinstance(s, list) else str(s or "UNKNOWN")).upper()


def is_active(j: dict | None) -> bool:
    return any(s in ACTIVE for s in job_state(j).split("+"))


def cancel_if_pending_past(inv, cfg: SlurmScheduler, job_id: str, j: dict | None, deadline: float, what: str,
                           after: str) -> None:
    """A job still PENDING at `deadline` (time.monotonic()) is cancelled: one line naming the field."""
    if "PENDING" in job_state(j) and time.monotonic() > deadline:
        cancel(cfg, job_id)
        raise UserError(f"{inv.path}: field 'scheduler.pending_timeout_s': {what} {job_id} still PENDING after "
                        f"{cfg.pending_timeout_s:g} s (reason: {(j or {}).get('state_reason') or '?'}); {after}")


def cancel(cfg: SlurmScheduler, job_id: str, signal: str | None = None) -> None:
    p = run(cfg, ["scancel", *([f"--signal={signal}", "--full"] if signal else []), job_id])
    if p.returncode != 0:
        raise SlurmError(f"scancel {job_id} failed: {last_line(p)}")
