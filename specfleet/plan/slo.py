"""`benchmark.slo`: the latency a request must meet to count as good (docs/slo.md: the fields and
vLLM's `--goodput` rule they follow). The runner passes the same limits to `vllm bench serve
--goodput`, so the result's `request_goodput` is vLLM's own figure; the report computes it again from
the per-request arrays and says when the two disagree.

Stdlib and pydantic only (the worker does not import it; commands.py does on the bastion).
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

LIMITS = ("ttft_ms", "tpot_ms", "e2el_ms")


class Slo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    e2el_ms: float | None = Field(default=None, gt=0)
    attainment_pct: float = Field(default=99.0, gt=0, le=100)

    @model_validator(mode="after")
    def _one(self) -> "Slo":
        if all(getattr(self, k) is None for k in LIMITS):
            raise ValueError("needs at least one of ttft_ms, tpot_ms, e2el_ms")
        return self

    def limits(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in LIMITS if getattr(self, k) is not None}

    def describe(self) -> str:
        return ", ".join(f"{k.removesuffix('_ms').upper()} <= {v:g} ms" for k, v in self.limits().items())
