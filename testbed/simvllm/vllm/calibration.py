"""What the running engine asks the model (vllm/model.py) for, per server and per request."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm import model as M

SOURCE = ("documented model testbed/simvllm/vllm/model.py (docs/engines.md); acceptance anchors and "
          "prefill from field report 000_7fcacc1dd17df079 §4.1 (vLLM 0.28.0, Qwen3-32B bf16, RTX PRO 6000 "
          "Blackwell, Spec-Bench 16 x 512)")


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

    def prefill_ms(self, prompt_tokens: int) -> float:
        return M.prefill_ms(prompt_tokens)


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
