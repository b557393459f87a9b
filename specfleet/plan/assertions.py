"""A plan's `assertions:`: figures the merged report must show, checked by `fab collect`, `fab report`
and `fab compare` (docs/compare.md, "Assertions": the fields and when one holds).

A row without the figure, or no row at all, is "not checked" with the reason, and fails: an assertion
that cannot be checked does not pass. Stdlib and pydantic only; the evaluator reads plain row dicts
(the report's merged rows), so the plan side does not need pandas.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# metric -> what it is (the merged rows' column names, docs/report.md); speedup has an interval
METRICS = {
    "speedup": "output tok/s / the same node's baseline output tok/s",
    "output_tok_s": "output tokens per second",
    "total_tok_s": "total tokens per second",
    "tpot_ms": "mean time per output token, ms",
    "ttft_ms": "mean time to first token, ms",
    "itl_ms": "mean inter-token latency, ms",
    "acceptance_rate_pct": "accepted / drafted tokens, %",
    "acceptance_length": "1 + accepted tokens per draft",
    "goodput_req_s": "requests per second that met the plan's SLO (benchmark.slo)",
}
PASSED, FAILED, NOT_CHECKED = "passed", "FAILED", "NOT CHECKED"


class Assertion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: str = Field(min_length=1)
    concurrency: int = Field(ge=1)
    metric: Literal[tuple(METRICS)]  # type: ignore[valid-type]
    # a NaN bound compares false with every figure (the assertion would always pass): finite only
    min: float | None = Field(default=None, allow_inf_nan=False)
    max: float | None = Field(default=None, allow_inf_nan=False)
    cell: str | None = None          # one bench cell (sweep); None: every cell at that concurrency
    use: Literal["value", "ci_low", "ci_high"] = "value"

    @model_validator(mode="after")
    def _bounds(self) -> "Assertion":
        if self.min is None and self.max is None:
            raise ValueError("needs min:, max: or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is larger than max {self.max:g}")
        if self.use != "value" and self.metric != "speedup":
            raise ValueError(f"use: {self.use} needs metric: speedup (only the speedup has an interval)")
        return self

    def describe(self) -> str:
        what = self.metric if self.use == "value" else f"{self.metric} {self.use.replace('_', ' ')}"
        bound = " and ".join(([f">= {self.min:g}"] if self.min is not None else []) +
                             ([f"<= {self.max:g}"] if self.max is not None else []))
        where = f"at concurrency {self.concurrency}" + (f" (cell {self.cell})" if self.cell else "")
        return f"{self.config} {what} {where} {bound}"


@dataclass
class AssertionResult:
    assertion: Assertion
    state: str            # passed | FAILED | NOT CHECKED
    detail: str

    @property
    def ok(self) -> bool:
        return self.state == PASSED

    def line(self) -> str:
        return f"assertion {self.state}: {self.assertion.describe()}: {self.detail}"


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return None if math.isnan(float(v)) else float(v)


def _column(a: Assertion) -> str:
    return {"value": a.metric, "ci_low": "speedup_ci_low", "ci_high": "speedup_ci_high"}[a.use]


def check(assertions: list[Assertion], rows: list[dict]) -> list[AssertionResult]:
    """Each assertion against the merged rows (dicts with config, concurrency, cell, node and the
    metric columns)."""
    out = []
    for a in assertions:
        hit = [r for r in rows if r.get("config") == a.config and r.get("concurrency") == a.concurrency
               and (a.cell is None or r.get("cell") == a.cell)]
        if not hit:
            out.append(AssertionResult(a, NOT_CHECKED, "no merged row of that configuration there"))
            continue
        col, bad, missing, seen = _column(a), [], [], []
        for r in hit:
            where = f"{r.get('node')}" + ("" if r.get("cell") in (None, f"conc{a.concurrency}") else f" {r.get('cell')}")
            v = _num(r.get(col))
            if v is None:
                missing.append(where)
                continue
            seen.append(f"{v:.3f} on {where}")
            if (a.min is not None and v < a.min) or (a.max is not None and v > a.max):
                bad.append(f"{v:.3f} on {where}")
        if bad:
            out.append(AssertionResult(a, FAILED, "measured " + ", ".join(bad)))
        elif missing:
            why = ("single run: no interval" if a.use != "value" else "the figure is not in the merged rows")
            out.append(AssertionResult(a, NOT_CHECKED, f"{why} on {', '.join(missing)}"))
        else:
            out.append(AssertionResult(a, PASSED, "measured " + ", ".join(seen)))
    return out
