"""The model-directory fact: is this candidate a model, with readable weights, and how big."""
from __future__ import annotations

from dataclasses import dataclass

from ..quoting import q
from .base import Fact, FactError, lines


@dataclass(frozen=True)
class ModelFiles:
    path: str
    weights: int      # *.safetensors and *.bin files
    unreadable: int   # of those, how many cannot be read
    size_bytes: int


@dataclass(frozen=True)
class ModelDirState(Fact):
    """A candidate model directory: None unless it holds a readable config.json."""

    path: str

    def command(self) -> str:
        d = q(self.path)
        return (f"[ -r {d}/config.json ] || exit 3; n=0; bad=0; "
                f"for f in {d}/*.safetensors {d}/*.bin; do [ -e \"$f\" ] || continue; n=$((n+1)); "
                f"head -c1 \"$f\" >/dev/null 2>&1 || bad=$((bad+1)); done; "
                f"echo \"$n $bad $(du -sbL -- {d} 2>/dev/null | cut -f1)\"")

    def parse(self, stdout: str, rc: int) -> ModelFiles | None:
        if rc == 3:
            return None
        words = (lines(stdout) or [""])[0].split()
        if rc != 0 or len(words) < 2 or not all(w.isdigit() for w in words):
            raise FactError(f"cannot inspect the model directory {self.path} ({stdout.strip()[:80]!r})")
        return ModelFiles(self.path, int(words[0]), int(words[1]), int(words[2]) if len(words) > 2 else 0)
