"""The JSONL event log: one line per step and host, for machines and post-mortems.

Each run writes `runs/<UTC time>-<task>.jsonl`. Lines carry time, run id,
host, step, status, changed, duration and the tail of stderr; every secret
value from the inventory is masked before a line is written (Ansible and
pyinfra both shipped secret leaks through their logs).
"""
from __future__ import annotations

import json
import os
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .step import StepResult

MASK = "********"
STDERR_TAIL = 2000


class Redactor:
    """Replaces every secret value by MASK, in text and in structured data.

    Masking runs on the values themselves, before anything renders or encodes
    them (a secret holding `"`, `\\` or non-ASCII would no longer match once
    JSON-escaped), and on every form the quoting layer writes a value in
    (quoting.mask_forms: shell-quoted, fstab's octal escapes, JSON, YAML, URL,
    repr), for text that already holds an encoded secret (an fstab line, a diff).
    """

    def __init__(self, secrets: list[str] | None = None):
        from .quoting import mask_forms
        self.secrets = sorted({s for s in (secrets or []) if len(s) >= 4}, key=len, reverse=True)
        # longest first, so a secret (or form) containing another is masked whole
        self.forms = sorted({f for s in self.secrets for f in mask_forms(s)}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        if not isinstance(text, str):
            return text
        for s in self.forms:
            text = text.replace(s, MASK)
        return text

    def data(self, value: Any) -> Any:
        """`value` with every string in it (keys included) masked; containers are copied."""
        if not self.secrets:
            return value
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple, set)):
            return [self.data(v) for v in value]
        return value


class EventLog:
    def __init__(self, task: str, directory: str | os.PathLike = "runs", redact: Redactor | None = None):
        self.run_id = uuid.uuid4().hex[:12]
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.path = Path(directory) / f"{stamp}-{task}-{self.run_id}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.redact = redact or Redactor()
        self._lock = threading.Lock()
        self._file = open(self.path, "a", buffering=1)
        self.write({"event": "run-start", "task": task})

    def write(self, record: dict) -> None:
        record = {"time": round(time.time(), 3), "run_id": self.run_id, **record}
        # mask the values, then encode: never mask the encoded text
        line = json.dumps(self.redact.data(_plain(record)), default=str)
        with self._lock:
            self._file.write(line + "\n")

    def step(self, r: StepResult) -> None:
        self.write({
            "event": "step",
            "host": r.host,
            "step": r.step,
            "status": r.status.value,
            "changed": r.changed,
            "duration_s": round(r.duration, 4),
            "changes": [c.summary for c in r.changes],
            "message": r.message,
            "stderr_tail": r.stderr_tail[-STDERR_TAIL:],
            # what the step read (e.g. bench's GPUs as nvidia-smi named them): the log says what a
            # decision was made on, not only that it was made
            **({"data": r.data} if r.data else {}),
        })

    def close(self, summary: dict | None = None) -> None:
        self.write({"event": "run-end", **(summary or {})})
        with self._lock:
            self._file.close()


def _plain(value: Any) -> Any:
    """JSON-ready values (str() of anything else), so that masking sees every string that is written."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
