"""A filesystem mounted from the right source with the right options."""
from __future__ import annotations

from ..facts.system import MountPoint
from ..shell import q
from ..step import Change, Step, StepFailed, Values


class Mount(Step):
    """`source` is mounted at `target` (read-only when 'ro' is in the options).

    Mounted from the right source already = ok; from another source = failure
    (unmounting someone's mount is not ours to decide). With present=False the
    mount is removed.
    """

    def __init__(self, source: str, target: str, fstype: str, options: str, present: bool = True):
        self.source, self.target, self.fstype, self.options = source, target, fstype, options
        self.present = present
        self.name = f"mount {source} on {target}" if present else f"unmount {target}"

    def facts(self) -> dict:
        return {"mount": MountPoint(self.target)}

    def decide(self, facts: Values) -> list[Change]:
        now = facts["mount"]
        t = q(self.target)
        if now is None:
            if not self.present:
                return []
            cmd = (f"mkdir -p -- {t} && mount -t {q(self.fstype)} -o {q(self.options)} "
                   f"{q(self.source)} {t}")
            return [Change(f"mount {self.source} on {self.target} ({self.options})", cmd,
                           f"+{self.source} {self.target} {self.fstype} {self.options}")]
        if not self.present:
            return [Change(f"unmount {self.target}", f"umount -- {t}", f"-{now.source} {self.target}")]
        if now.source != self.source:
            raise StepFailed(f"{self.target} is already mounted from {now.source}, not {self.source}; "
                             f"unmount it (umount {self.target}) if it is not in use")
        if "ro" in self.options.split(",") and "ro" not in now.options:
            return [Change(f"remount {self.target} read-only", f"mount -o remount,ro -- {t}",
                           f"-{','.join(now.options)}\n+ro")]
        return []
