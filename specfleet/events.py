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

from .step import StepResult

MASK = "********"
STDERR_TAIL = 2000


class Redactor:
    def __init__(self, secrets: list[str] | None = None):
        # longest first, so a secret containing another is masked whole
        self.secrets = sorted({s for s in (secrets or []) if len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, MASK)
        return text


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
        line = self.redact(json.dumps(record, default=str))
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
        })

    def close(self, summary: dict | None = None) -> None:
        self.write({"event": "run-end", **(summary or {})})
        with self._lock:
            self._file.close()
