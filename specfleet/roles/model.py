"""model: which model directory each worker will serve from, and whether it is readable.

Field report §3.5 picked the first candidate with a config.json (local copy
first, then NFS), so a lost local copy fell back to NFS: 10-minute loads
instead of seconds. This role reports which one each worker will use.
"""
from __future__ import annotations

from specfleet.inventory import Host
from specfleet.shell import q
from specfleet.step import Change, Facts, Step, StepFailed
from specfleet.steps.sync import RemoteCopy


class ModelDir(Step):
    needs_root = False

    def __init__(self, candidates: list[str]):
        self.candidates = candidates
        self.name = "model directory"

    def probe(self) -> str:
        # candidates are named by index, never echoed: a path is data in a quoted word only
        parts = []
        for i, c in enumerate(self.candidates):
            d = q(c)
            parts.append(
                f"if [ -r {d}/config.json ]; then n=0; bad=0; "
                f"for f in {d}/*.safetensors {d}/*.bin; do [ -e \"$f\" ] || continue; n=$((n+1)); "
                f"head -c1 \"$f\" >/dev/null 2>&1 || bad=$((bad+1)); done; "
                f"printf 'FOUND {i}|%s|%s|%s\\n' \"$n\" \"$bad\" \"$(du -sbL -- {d} 2>/dev/null | cut -f1)\"; "
                f"else echo 'MISSING {i}'; fi")
        return "; ".join(parts)

    def _found(self, facts: Facts) -> list[dict]:
        out = []
        for ln in facts.lines:
            if ln.startswith("FOUND "):
                idx, n, bad, size = ln[6:].split("|", 3)
                out.append({"path": self.candidates[int(idx)], "weights": int(n), "unreadable": int(bad),
                            "size_bytes": int(size or 0)})
        return out

    def decide(self, facts: Facts) -> list[Change]:
        found = self._found(facts)
        if not found:
            raise StepFailed(f"no readable model directory (tried {', '.join(self.candidates)}): "
                             "mount the share (fab provision --only nfs) or stage a copy (fab stage-model)")
        best = found[0]
        if best["weights"] == 0:
            raise StepFailed(f"{best['path']} has config.json but no *.safetensors / *.bin weights")
        if best["unreadable"]:
            raise StepFailed(f"{best['unreadable']} weight file(s) in {best['path']} are not readable")
        return []

    def report(self, facts: Facts) -> dict:
        found = self._found(facts)
        return {"model": found[0] if found else None}


def candidates(host: Host) -> list[str]:
    return list(host.require("model_candidates"))


def steps(host: Host) -> list[Step]:
    return [ModelDir(candidates(host))]


def stage_steps(host: Host) -> list[Step]:
    """Copy the model from the share (last candidate) to local disk (first candidate)."""
    cands = candidates(host)
    if len(cands) < 2:
        raise StepFailed("model_candidates needs a local path first and the share's path last")
    return [RemoteCopy(cands[-1], cands[0]), ModelDir([cands[0]])]
