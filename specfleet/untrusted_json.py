"""JSON from a host that is not trusted (a worker's files and probe output), parsed within bounds.

Bounded in size and in nesting depth: a 1e6-deep `[[[...]]]` is refused in linear time, never a
RecursionError. Standard library only, below the facts (which parse probe output with it) and the
results (which parse fetched files with it).
"""
from __future__ import annotations

import itertools
import json
import re
from typing import Any

JSON_MAX_DEPTH = 64  # a vLLM result nests 3 deep; state.json 4

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKETS = re.compile(r"[^\[\]{}]+")


class UntrustedJSON(ValueError):
    """JSON from a worker that breaks a bound (size or depth)."""


def json_depth(text: str) -> int:
    """How deep arrays and objects nest in `text` (strings skipped); linear, no recursion."""
    if text.count("[") + text.count("{") <= 1:
        return text.count("[") + text.count("{")
    b = _BRACKETS.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(1 if c in "[{" else -1 for c in b), default=0)


def loads(text: str, max_bytes: int | None = None, max_depth: int = JSON_MAX_DEPTH) -> Any:
    """json.loads within bounds: UntrustedJSON (a ValueError) for text too large or nested too deep,
    json.JSONDecodeError (also a ValueError) for invalid JSON."""
    if max_bytes is not None and len(text) > max_bytes:
        raise UntrustedJSON(f"{len(text)} characters of JSON, over the {max_bytes / 2**20:g} MB limit")
    depth = json_depth(text)
    if depth > max_depth:
        raise UntrustedJSON(f"JSON nested {depth} levels deep, over the limit of {max_depth}")
    try:
        return json.loads(text)
    except RecursionError:  # not reached after the depth check; never let it out
        raise UntrustedJSON(f"JSON nested too deep to parse (limit {max_depth})") from None


def loads_or_none(text: str, max_bytes: int | None = None) -> Any:
    """The parsed value; None for empty text or JSON that is invalid or out of bounds (a half-written
    or hostile file is never trusted, and never an error of the reader)."""
    try:
        return loads(text, max_bytes) if text.strip() else None
    except ValueError:
        return None
