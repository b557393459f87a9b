"""Calibration table of the simulated engine (source: field report §4.1, vLLM 0.28.0,
Qwen3-32B bf16 on one RTX PRO 6000 Blackwell 96 GB, Spec-Bench 16 prompts x 512 tokens).

Per configuration kind and batch size (1 and 16; linear in between and beyond):
  step_ms      duration of one engine decode step (memory-bandwidth bound; ≈ the report's ITL,
               for vanilla its TPOT)
  ttft_ms      time to first token of a request admitted into an idle engine (c=1) or together
               with 15 others (c=16); modelled as step + prefill_extra(a + b·admitted)
  draft_freq   fraction of decode steps of a request that carry a draft (n-gram only drafts
               when the prompt lookup matches; EAGLE drafts every step)
  per_pos      P(draft position i accepted) = vLLM's per-position acceptance rate (fraction)
The derived numbers reproduce the report: e.g. eagle3 c=1 TPOT ≈ 49.47 / (1 + 1.245) ≈ 22 ms,
ngram 4/2-128 c=1 TPOT ≈ 47.40 / (1 + 0.229·0.881) ≈ 39.4 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

# kind -> (c=1 values, c=16 values)
TABLE: dict[str, dict] = {
    "vanilla": {
        "label": "vanilla",
        "k": 0,
        "step_ms": (46.94, 51.65),
        "ttft_ms": (68.79, 128.81),
        "draft_freq": (0.0, 0.0),
        "per_pos": ((), ()),
    },
    "ngram_narrow": {  # {"method":"ngram","num_speculative_tokens":6,"prompt_lookup_min":4,"prompt_lookup_max":6}
        "label": "ngram 6 / 4-6",
        "k": 6,
        "step_ms": (47.47, 56.69),
        "ttft_ms": (119.81, 124.08),
        "draft_freq": (0.057, 0.060),
        # sums 1.562 / 1.661 -> acceptance length 2.562 / 2.661, rate 26.0 % / 27.7 %
        "per_pos": ((0.52, 0.33, 0.24, 0.19, 0.155, 0.127),
                    (0.55, 0.35, 0.255, 0.203, 0.165, 0.138)),
    },
    "ngram_wide": {  # {"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":2,"prompt_lookup_max":128}
        "label": "ngram 4 / 2-128",
        "k": 4,
        "step_ms": (47.40, 54.34),
        "ttft_ms": (119.53, 125.55),
        "draft_freq": (0.229, 0.243),
        # sums 0.881 / 0.922 -> acceptance length 1.881 / 1.922, rate 22.0 % / 23.0 %
        "per_pos": ((0.40, 0.22, 0.15, 0.111), (0.415, 0.232, 0.158, 0.117)),
    },
    "eagle3": {  # {"method":"eagle3","model":".../Qwen3-32B-speculator.eagle3","num_speculative_tokens":3}
        "label": "eagle3 k=3",
        "k": 3,
        "step_ms": (49.47, 57.20),
        "ttft_ms": (89.78, 141.73),
        "draft_freq": (1.0, 1.0),
        # sums 1.245 / 1.272 -> acceptance length 2.245 / 2.272, rate 41.5 % / 42.4 %
        "per_pos": ((0.66, 0.38, 0.205), (0.67, 0.39, 0.212)),
    },
}

SOURCE = ("field report 000_7fcacc1dd17df079 §4.1 (vLLM 0.28.0, Qwen3-32B bf16, "
          "RTX PRO 6000 Blackwell, Spec-Bench 16 x 512)")

# n-gram draft frequency by prompt_lookup_min (the report has points at 4 and 2)
_NGRAM_FREQ_BY_MIN = {1: 0.33, 2: 0.229, 3: 0.12, 4: 0.057, 5: 0.045, 6: 0.038}


def _lerp(pair, n: float) -> float:
    lo, hi = pair
    return lo + (hi - lo) * (n - 1) / 15.0


def _profile(base: tuple, k: int) -> list[float]:
    """Per-position acceptance profile resized to k positions (geometric tail)."""
    out = list(base[:k])
    if not base:
        return [0.0] * k
    ratio = base[-1] / base[-2] if len(base) > 1 and base[-2] > 0 else 0.6
    while len(out) < k:
        out.append(out[-1] * ratio)
    return out


@dataclass
class Model:
    kind: str
    label: str
    k: int
    freq_scale: float = 1.0
    step_extra_ms: float = 0.0

    def step_ms(self, batch: int) -> float:
        return max(1.0, _lerp(TABLE[self.kind]["step_ms"], max(1, batch)) + self.step_extra_ms)

    def prefill_extra_ms(self, admitted: int) -> float:
        """Extra time of a step that prefills `admitted` new requests (linear fit of the table)."""
        t = TABLE[self.kind]
        e1 = t["ttft_ms"][0] - t["step_ms"][0]
        e16 = t["ttft_ms"][1] - t["step_ms"][1]
        b = max(0.0, (e16 - e1) / 15.0)
        a = e1 - b if b > 0 else max(e1, e16)
        return max(0.0, a + b * max(1, admitted))

    def draft_freq(self, batch: int) -> float:
        return min(1.0, _lerp(TABLE[self.kind]["draft_freq"], max(1, batch)) * self.freq_scale)

    def per_pos(self, batch: int) -> list[float]:
        lo, hi = TABLE[self.kind]["per_pos"]
        a, b = _profile(lo, self.k), _profile(hi, self.k)
        w = (max(1, batch) - 1) / 15.0
        vals = [min(0.99, max(0.0, x + (y - x) * w)) for x, y in zip(a, b)]
        for i in range(1, len(vals)):  # P(accept >= i+1) is non-increasing
            vals[i] = min(vals[i], vals[i - 1])
        return vals


def model_for(spec: dict | None) -> Model:
    """Map a (validated) speculative config to the nearest calibrated kind."""
    if not spec:
        return Model("vanilla", "vanilla", 0)
    method = str(spec.get("method") or "")
    k = int(spec.get("num_speculative_tokens") or 1)
    if method.startswith("ngram"):
        lo = int(spec.get("prompt_lookup_min") or 5)
        hi = int(spec.get("prompt_lookup_max") or 5)
        kind = "ngram_wide" if hi > 16 or lo <= 2 else "ngram_narrow"
        ref_min = 2 if kind == "ngram_wide" else 4
        freq = _NGRAM_FREQ_BY_MIN.get(min(max(lo, 1), 6))
        scale = freq / _NGRAM_FREQ_BY_MIN[ref_min]
        if kind == "ngram_narrow" and hi > 6:
            scale *= 1.0 + min(hi - 6, 10) * 0.05
        extra = (k - TABLE[kind]["k"]) * 0.25
        return Model(kind, f"{TABLE[kind]['label']} (nearest to ngram {k}/{lo}-{hi})", k, scale, extra)
    # eagle, eagle3, mtp, draft_model, medusa ...: a trained drafter that drafts every step
    extra = (k - 3) * 0.6
    return Model("eagle3", f"{TABLE['eagle3']['label']} (nearest to {method} k={k})", k, 1.0, extra)
