"""Files the tests use that the repository does not hold: the full Spec-Bench question file (480
prompts; never committed) and fixtures of real GPU runs. They lie in `shared/` beside the checkout
(`../shared` from the repository root; a fresh clone links it there). A test that needs one skips
when it is absent (docs/dev/testing.md)."""
from __future__ import annotations

from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SPEC_BENCH = SHARED / "datasets" / "spec_bench" / "question.jsonl"
