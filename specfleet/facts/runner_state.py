"""A worker's campaign as the bastion reads it in one round trip: the run spec and state.json the runner
wrote, the PID in the runner's lock and whether that PID is a live runner, the done markers, the host's
boot identity. `fab bench` batches it as a fact (`CampaignView`) with the GPUs; `status`, `stop`, `collect`
and the Slurm path run `view_script` alone. Each section travels as one base64 line
(specfleet.shell.sections_script): no file content can look like the framing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..shell import q, read_sections, sections_script
from ..untrusted_json import UntrustedJSON, loads
from ..worker import layout
from .base import Fact


@dataclass
class RunnerView:
    """What one round trip tells about a worker's campaign."""

    spec: dict | None = None
    state: dict | None = None
    runner_pid: int | None = None
    alive: bool = False
    done_markers: list[str] = field(default_factory=list)
    boot: str | None = None  # the host's boot identity now (worker host.boot_identity)
    log_tail: str = ""  # the last line of the run folder's runner.log ("" when absent or empty)
    problems: list[str] = field(default_factory=list)  # a run.json or state.json not read, and why

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
        f"t=$(cat {layout.boot_marker('$(id -u)')} 2>/dev/null); echo \"$b${{t:+/$t}}\"",
        # what a runner that died said last (`fab status`: "runner dead: ...")
        f"tail -c 2048 {d}/{layout.RUNNER_LOG}"])


def parse_view(stdout: str) -> RunnerView:
    parts = read_sections(stdout, 6)
    pid_lines = parts[2].split()
    last = next((ln.strip() for ln in reversed(parts[5].splitlines()) if ln.strip()), "")
    (spec, spec_why), (state, state_why) = (_shaped(*_json(parts[i]), fields) for i, fields in
                                            ((0, ("name",)), (1, ("name", "status"))))
    return RunnerView(spec=spec, state=state,
                      runner_pid=int(pid_lines[0]) if pid_lines and pid_lines[0].isdigit() else None,
                      alive="ALIVE" in pid_lines, done_markers=parts[3].split(), boot=parts[4].strip() or None,
                      log_tail="".join(c if c.isprintable() else "?" for c in last)[-300:],
                      problems=[f"{name}: {why}: not read" for name, why in
                                ((layout.RUN_SPEC, spec_why), (layout.STATE, state_why)) if why])


def items_problem(doc: dict, fields: tuple[str, ...] = ("name", "status")) -> str | None:
    """Why a run.json or state.json that parses is not of the shape the bastion reads (`items` a list of
    objects, each with these string fields, and an `error` that is a string or null), or None."""
    if "items" not in doc:
        return "no items"
    items = doc["items"]
    if not isinstance(items, list):
        return f"items is {json.dumps(items)[:40]}, not a list of objects"
    for k, item in enumerate(items):
        if not isinstance(item, dict):
            return f"items[{k}] is {json.dumps(item)[:40]}, not an object"
        for f in fields:
            if f not in item:
                return f"items[{k}] has no {f}"
            if not isinstance(item[f], str):
                return f"items[{k}].{f} is {json.dumps(item[f])[:40]}, not a string"
        if not isinstance(item.get("error"), (str, type(None))):
            return f"items[{k}].error is {json.dumps(item['error'])[:40]}, not a string"
    return None


def _shaped(doc: dict | None, why: str | None, fields: tuple[str, ...]) -> tuple[dict | None, str | None]:
    """`doc`, or (None, why) when it was refused or its items are not of the runner's shape: a file
    read by its shape is never half trusted (a hostile or damaged file reads as absent, named in one line)."""
    why = why or (items_problem(doc, fields) if doc is not None else None)
    return (None, why) if why else (doc, None)


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


def _json(text: str) -> tuple[dict | None, str | None]:
    """(the JSON object the runner wrote, None), (None, None) for no file, or (None, why) for a file
    that is out of bounds (a 1e6-deep [[[...]]], issue 28), not JSON or not an object: never trusted
    (the runner writes atomically, so such a file is damaged or hostile, not half-written)."""
    if not text.strip():
        return None, None
    try:
        value = loads(text)
    except UntrustedJSON as e:
        return None, str(e)
    except ValueError as e:
        return None, f"not JSON ({str(e)[:60]})"
    return (value, None) if isinstance(value, dict) else (None, f"{type(value).__name__}, not an object")


@dataclass(frozen=True)
class FolderOwner:
    """One path of a campaign's folders: its kind ("dir", "file", "link", "other", "absent"), owner and mode."""

    kind: str
    owner: str = ""
    mode: str = ""


@dataclass(frozen=True)
class FolderOwners:
    """`CampaignFolders`'s value: each path's FolderOwner, in its order, and the first entry of the tree the
    user does not own ("" when none; "?" when the host could not say)."""

    paths: list[FolderOwner]
    foreign: str = ""


@dataclass(frozen=True)
class CampaignFolders(Fact):
    """Who owns a campaign's folders on a worker (`paths`: the work_dir, the campaign's folder, the run
    folder, the runner's lock) and the first entry inside `tree` (the run folder) that `user` does not
    own: the runner runs as the login user, so all of it must be that user's (`remote.RunFolder`)."""

    user: str
    paths: tuple[str, ...]
    tree: str

    def command(self) -> str:
        probes = [f"if [ -L {q(p)} ]; then echo link; elif [ -d {q(p)} ]; then echo \"dir $(stat -c '%U %a' -- {q(p)})\"; "
                  f"elif [ -f {q(p)} ]; then echo \"file $(stat -c '%U %a' -- {q(p)})\"; "
                  f"elif [ -e {q(p)} ]; then echo other; else echo absent; fi" for p in self.paths]
        # `-user` needs a name the host knows: an unknown user makes every entry foreign (find fails)
        probes.append(f"[ -d {q(self.tree)} ] && [ ! -L {q(self.tree)} ] && "
                      f"{{ find {q(self.tree)} -mindepth 1 ! -user {q(self.user)} -print -quit 2>/dev/null || echo '?'; }} "
                      "| head -n 1 | sed 's/^/foreign /'; true")
        return "; ".join(probes)

    def parse(self, stdout: str, rc: int) -> "FolderOwners":
        rows = stdout.split("\n")
        owners = []
        for k in range(len(self.paths)):
            words = (rows[k] if k < len(rows) else "absent").split()
            kind = words[0] if words and words[0] in ("dir", "file", "link", "other") else "absent"
            owners.append(FolderOwner(kind, *words[1:3]) if kind in ("dir", "file") and len(words) == 3
                          else FolderOwner(kind))
        foreign = next((r[len("foreign "):] for r in rows[len(self.paths):] if r.startswith("foreign ")), "")
        return FolderOwners(owners, foreign)
