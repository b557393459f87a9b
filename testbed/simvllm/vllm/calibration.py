"""What the running engine asks the model (vllm/model.py) for, per server and per request.

The decode step time and the acceptance come from the documented model (model.py). Only the
prefill part of TTFT is still played back from the field report's §4.1 table (TTFT at batch 1
and 16 per kind, modelled as step + a + b·admitted): the report's prompts are too few to model
prefill from first principles, and TTFT is not what the sweeps compare.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm import model as M

SOURCE = ("documented model testbed/simvllm/vllm/model.py (docs/engines.md); acceptance anchors and "
          "TTFT from field report 000_7fcacc1dd17df079 §4.1 (vLLM 0.28.0, Qwen3-32B bf16, RTX PRO 6000 "
          "Blackwell, Spec-Bench 16 x 512)")

# kind -> (step ms, TTFT ms) at batch 1 and 16 (report §4.1): only TTFT - step is used
TTFT_TABLE = {
    "vanilla": ((46.94, 51.65), (68.79, 128.81)),
    "ngram_narrow": ((47.47, 56.69), (119.81, 124.08)),
    "ngram_wide": ((47.40, 54.34), (119.53, 125.55)),
    "eagle": ((49.47, 57.20), (89.78, 141.73)),
}


def prefill_extra_ms(kind: str, admitted: int) -> float:
    """Extra time of a step that prefills `admitted` new requests (linear in the two points)."""
    (s1, s16), (t1, t16) = TTFT_TABLE[kind]
    e1, e16 = t1 - s1, t16 - s16
    b = max(0.0, (e16 - e1) / 15.0)
    a = e1 - b if b > 0 else max(e1, e16)
    return max(0.0, a + b * max(1, admitted))


@dataclass
class EngineModel:
    """One server's model: its method, its hardware/model setup, its TP size."""

    method: M.Method
    setup: M.Setup = M.DEFAULT
    tp: int = 1
    _acc: dict = field(default_factory=dict)

    @property
    def k(self) -> int:
        return self.method.k

    @property
    def label(self) -> str:
        return f"{self.method.label}, TP={self.tp}" if self.tp > 1 else self.method.label

    def acceptance(self, category: str | None, output_len: int) -> M.Acceptance:
        key = (category, output_len)
        if key not in self._acc:
            self._acc[key] = M.acceptance(self.method, category, output_len)
        return self._acc[key]

    def step_ms(self, seqs: int, tokens: int, context_tokens: int) -> float:
        return M.step_ms(self.method, seqs, tokens, context_tokens, self.setup, self.tp)

    def prefill_extra_ms(self, admitted: int) -> float:
        return prefill_extra_ms(self.method.kind, admitted)


def engine_model(spec: dict | None, *, weights_gib: float, kv_bytes_per_token: int,
                 drafter_gib: float | None, gpu: dict, tp: int = 1) -> EngineModel:
    """The served model and the GPU (gpu.json's optional bandwidth/FLOPS) set the model's Setup."""
    kw = {"weights_gib": weights_gib, "kv_bytes_per_token": kv_bytes_per_token}
    if drafter_gib:
        kw["drafter_gib"] = drafter_gib
    for key, name in (("memory_bandwidth_gbps", "mem_bw_gbps"), ("bf16_tflops", "bf16_tflops")):
        try:
            if gpu.get(key):
                kw[name] = float(gpu[key])
        except (TypeError, ValueError):
            pass
    return EngineModel(M.method_for(spec), M.with_setup(**kw), max(1, int(tp)))
