"""A filesystem mounted from the right source with the right options."""
from __future__ import annotations

from ..shell import q
from ..step import Change, Facts, Step, StepFailed


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

    def probe(self) -> str:
        return f"findmnt -n -o SOURCE,OPTIONS --mountpoint {q(self.target)} || echo NOTMOUNTED"

    def decide(self, facts: Facts) -> list[Change]:
        line = facts.lines[0] if facts.lines else "NOTMOUNTED"
        t = q(self.target)
        if line == "NOTMOUNTED":
            if not self.present:
                return []
            cmd = (f"mkdir -p -- {t} && mount -t {q(self.fstype)} -o {q(self.options)} "
                   f"{q(self.source)} {t}")
            return [Change(f"mount {self.source} on {self.target} ({self.options})", cmd,
                           f"+{self.source} {self.target} {self.fstype} {self.options}")]
        source, _, opts = line.partition(" ")
        opts = opts.strip()
        if not self.present:
            return [Change(f"unmount {self.target}", f"umount -- {t}", f"-{source} {self.target}")]
        if source != self.source:
            raise StepFailed(f"{self.target} is already mounted from {source}, not {self.source}; "
                             f"unmount it (umount {self.target}) if it is not in use")
        want_ro = "ro" in self.options.split(",")
        is_ro = "ro" in opts.split(",")
        if want_ro and not is_ro:
            return [Change(f"remount {self.target} read-only", f"mount -o remount,ro -- {t}",
                           f"-{opts}\n+ro")]
        return []
