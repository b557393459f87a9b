"""The simulated engine's performance model: pure functions, stdlib only, SIMULATED numbers.

One decode step of a batch of B sequences that verifies N query tokens (B, plus the draft tokens
of the sequences that drafted) and reads the KV cache of C context tokens takes

    step_ms = T_FIXED + roofline(T_WEIGHTS, C_TOKEN * N) + T_KV * C + T_SEQ * B + method cost

    roofline(m, c) = (m^P + c^P)^(1/P)     a smooth max: memory-bound until the GEMMs' compute
                                           (2 * params FLOP per token) exceeds the weight read

and yields, per sequence, 1 + (accepted draft tokens) output tokens. Speculation pays while its
acceptance outweighs its extra step cost; the extra cost grows with B (more verified tokens push
the step from the memory-bound into the compute-bound regime; n-gram's proposer and the loss of
async scheduling cost CPU time per sequence), so its gain falls with concurrency and crosses 1.0.

Acceptance (per request, independent of batch size, as in vLLM: greedy verification does not
depend on the batch):
  n-gram   drafts on a fraction f of its steps (the prompt-lookup matched), P(>= i accepted | a
           draft) = p1 * i^-beta (copy runs are heavy-tailed); f and p1 scale with the category's
           copy affinity (summarization, RAG, extraction copy the input) and f with output length
           (a longer output repeats itself more).
  EAGLE-3  drafts every step, P(>= i accepted) = a1 * r^(i-1) (per-position decay), a1 scales
           mildly with the category and decays slightly with output length.

Every parameter is below, with where it comes from. Hardware and model constants are public
specs; efficiencies and overheads are stated assumptions; the acceptance anchors are the field
report's §4.1 (its 16-prompt Spec-Bench mix), the category factors are assumptions shaped after
Spec-Bench (Xia et al., 2024: prompt lookup gains most on summarization and RAG, EAGLE is the
least category-dependent). Nothing is fitted to a table: docs/engines.md compares the outcome with
the report. `speedup()` is what a benchmark of crossover search compares its findings against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

GIB = 1024 ** 3

# ------------------------------------------------------------------ hardware and model (public specs)


@dataclass(frozen=True)
class Setup:
    """GPU, model and the engine's efficiencies (defaults: the field report's node)."""

    mem_bw_gbps: float = 1792.0      # RTX PRO 6000 Blackwell Server Edition, GDDR7
    bf16_tflops: float = 503.8       # same card, dense BF16 tensor throughput
    weights_gib: float = 61.03       # Qwen3-32B bf16 (report §5.3)
    kv_bytes_per_token: int = 262144  # 64 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes
    drafter_gib: float = 1.44        # Qwen3-32B EAGLE-3 speculator (1 layer + LM head)
    layers: int = 64
    hidden: int = 5120
    bw_eff: float = 0.80             # assumption: achieved fraction of peak memory bandwidth
    mfu: float = 0.50                # assumption: achieved fraction of peak FLOPS in decode GEMMs
    nvlink_gbps: float = 450.0       # per direction, for TP all-reduces (HGX-class NVLink)
    allreduce_us: float = 8.0        # assumption: latency of one all-reduce

    @property
    def params(self) -> float:
        return self.weights_gib * GIB / 2  # bf16: 2 bytes per parameter


DEFAULT = Setup()

T_FIXED_MS = 1.0        # per step: CUDA-graph replay, launch, scheduler bookkeeping (assumption)
T_SEQ_MS = 0.10         # per running sequence: sampler, detokenizer, output processing (assumption)
ROOFLINE_P = 3.0        # sharpness of the memory/compute transition (assumption)
NGRAM_SYNC_MS = 0.5     # n-gram disables async scheduling (vLLM warns): the scheduler's CPU time shows
NGRAM_SEQ_MS = 0.12     # n-gram proposer (numba prompt lookup) per running sequence
EAGLE_LAUNCH_MS = 0.2   # per drafter forward, on top of reading the drafter's weights
SPEC_TOKEN_MS = 0.01    # rejection sampler and bookkeeping per draft token (assumption)
MAX_NUM_SEQS = 256      # vLLM's default: concurrency above it queues
# Prefill: a step that admits requests takes PREFILL_A_MS + PREFILL_MS_PER_TOKEN x their prompt
# tokens longer, whatever the method (the same forward pass). Fitted to the report's vanilla TTFT at
# concurrency 1 and 16 (68.79 / 128.81 ms on its 143-token prompts): the one place the model
# plays a measurement back, because those prompts are too few to model prefill from first principles.
PREFILL_A_MS = 18.16
PREFILL_MS_PER_TOKEN = 3.687 / 143

# ------------------------------------------------------------------ acceptance

#: Spec-Bench's 13 categories (vllm bench serve --spec-bench-category takes these names).
CATEGORIES = ("translation", "summarization", "qa", "math_reasoning", "rag", "writing", "roleplay",
              "reasoning", "math", "coding", "extraction", "stem", "humanities")

#: n-gram copy affinity (how much of the answer repeats the prompt), assumption after Spec-Bench.
NGRAM_AFFINITY = {"summarization": 3.0, "rag": 2.6, "extraction": 2.2, "coding": 1.4,
                  "math_reasoning": 1.1, "math": 1.0, "reasoning": 0.8, "stem": 0.8, "qa": 0.7,
                  "humanities": 0.7, "translation": 0.6, "writing": 0.5, "roleplay": 0.5}
#: EAGLE-3 first-position acceptance factor by category, assumption after Spec-Bench (±12 %).
EAGLE_AFFINITY = {"math": 1.10, "math_reasoning": 1.08, "coding": 1.08, "extraction": 1.02,
                  "summarization": 1.00, "reasoning": 1.00, "stem": 1.00, "rag": 0.98,
                  "humanities": 0.98, "writing": 0.97, "roleplay": 0.95, "qa": 0.93, "translation": 0.88}
#: Category mix of the report's 16 prompts (the first 16 of the loader's seed-0 shuffle of the
#: 480-prompt file): the acceptance anchors below were measured on this mix.
REPORT_MIX = {"translation": 4, "math_reasoning": 3, "qa": 3, "summarization": 1, "coding": 1,
              "writing": 1, "rag": 1, "extraction": 1, "stem": 1}
#: Mean prompt tokens per category (the sim's token counter, chat template applied twice as
#: `--backend openai-chat` does), for the KV term of the pure function.
PROMPT_TOKENS = {"writing": 69, "roleplay": 92, "reasoning": 90, "math": 61, "coding": 64,
                 "extraction": 275, "stem": 65, "humanities": 45, "translation": 57,
                 "summarization": 827, "qa": 30, "math_reasoning": 76, "rag": 779}
MIX_PROMPT_TOKENS = 143  # the report's 16 prompts
REF_OUTPUT_LEN = 512     # the report's --spec-bench-output-len
NGRAM_LEN_EXP = 0.2      # f ∝ (output_len / 512)^0.2 (assumption)
EAGLE_LEN_EXP = -0.03    # a1 ∝ (output_len / 512)^-0.03 (assumption)


def _mix_mean(table: dict) -> float:
    n = sum(REPORT_MIX.values())
    return sum(table[c] * w for c, w in REPORT_MIX.items()) / n


#: The report's measured acceptance anchors (§4.1, concurrency 1 and 16 averaged).
#: n-gram: draft frequency f, p1 and the power-law exponent beta of P(>= i | draft) = p1 * i^-beta.
NGRAM_KINDS = {
    "ngram_wide": {"label": "ngram 4 / 2-128", "ref_min": 2, "f": 0.236, "p1": 0.408, "beta": 0.86},
    "ngram_narrow": {"label": "ngram 6 / 4-6", "ref_min": 4, "f": 0.0585, "p1": 0.535, "beta": 0.66},
}
#: n-gram draft frequency by prompt_lookup_min (the report has points at 4 and 2; others assumed)
NGRAM_FREQ_BY_MIN = {1: 0.33, 2: 0.229, 3: 0.12, 4: 0.057, 5: 0.045, 6: 0.038}
EAGLE = {"a1": 0.665, "r": 0.57}  # EAGLE-3 k=3: .66 .38 .205 (c=1) / .67 .39 .212 (c=16)


@dataclass(frozen=True)
class Method:
    """A speculative configuration reduced to what the model needs."""

    kind: str            # "vanilla" | "ngram_wide" | "ngram_narrow" | "eagle"
    k: int = 0
    freq_scale: float = 1.0  # n-gram: prompt_lookup_min/max relative to the anchor

    @property
    def label(self) -> str:
        if self.kind == "vanilla":
            return "vanilla"
        if self.kind == "eagle":
            return f"eagle3 k={self.k}"
        return f"{NGRAM_KINDS[self.kind]['label']} k={self.k}"


def method_for(spec: dict | None) -> Method:
    """A (validated) --speculative-config -> the modelled method."""
    if not spec:
        return Method("vanilla")
    m = str(spec.get("method") or "")
    k = int(spec.get("num_speculative_tokens") or 1)
    if m.startswith("ngram") or m == "suffix":
        lo = int(spec.get("prompt_lookup_min") or 5)
        hi = int(spec.get("prompt_lookup_max") or lo)
        kind = "ngram_wide" if hi > 16 or lo <= 2 else "ngram_narrow"
        scale = NGRAM_FREQ_BY_MIN[min(max(lo, 1), 6)] / NGRAM_FREQ_BY_MIN[NGRAM_KINDS[kind]["ref_min"]]
        if kind == "ngram_narrow" and hi > 6:
            scale *= 1.0 + min(hi - 6, 10) * 0.05  # a longer lookup window matches a little more
        return Method(kind, k, scale)
    return Method("eagle", k)  # eagle, eagle3, mtp, draft models: a trained drafter, every step


def method(name: str, k: int = 0, prompt_lookup_min: int | None = None,
           prompt_lookup_max: int | None = None) -> Method:
    """By name: "vanilla", "ngram" (default lookup 2-128 as the report's), "eagle3"."""
    if name == "vanilla":
        return Method("vanilla")
    if name.startswith("ngram"):
        lo = 2 if prompt_lookup_min is None else prompt_lookup_min
        hi = 128 if prompt_lookup_max is None else prompt_lookup_max
        return method_for({"method": "ngram", "num_speculative_tokens": k or 4,
                           "prompt_lookup_min": lo, "prompt_lookup_max": hi})
    return method_for({"method": name, "num_speculative_tokens": k or 3})


@dataclass(frozen=True)
class Acceptance:
    draft_freq: float          # fraction of a sequence's decode steps that carry a draft
    per_pos: tuple             # P(accepted >= i | draft), i = 1..k (non-increasing)

    @property
    def mean_accepted(self) -> float:
        return sum(self.per_pos)

    @property
    def tokens_per_step(self) -> float:
        return 1.0 + self.draft_freq * self.mean_accepted


def acceptance(m: Method, category: str | None = None, output_len: int = REF_OUTPUT_LEN) -> Acceptance:
    """Per-request acceptance of method `m` on a Spec-Bench category (None: the report's mix)."""
    if m.kind == "vanilla" or m.k <= 0:
        return Acceptance(0.0, ())
    length = max(1, output_len) / REF_OUTPUT_LEN
    if m.kind == "eagle":
        e = EAGLE_AFFINITY.get(category, _mix_mean(EAGLE_AFFINITY)) / _mix_mean(EAGLE_AFFINITY)
        a1 = min(0.95, EAGLE["a1"] * e * length ** EAGLE_LEN_EXP)
        return Acceptance(1.0, tuple(a1 * EAGLE["r"] ** i for i in range(m.k)))
    kind = NGRAM_KINDS[m.kind]
    a = NGRAM_AFFINITY.get(category, _mix_mean(NGRAM_AFFINITY)) / _mix_mean(NGRAM_AFFINITY)
    f = min(1.0, kind["f"] * m.freq_scale * a * length ** NGRAM_LEN_EXP)
    p1 = min(0.92, kind["p1"] * math.sqrt(a))
    return Acceptance(f, tuple(p1 * (i + 1) ** -kind["beta"] for i in range(m.k)))


# ------------------------------------------------------------------ step time


def step_ms(m: Method, seqs: int, tokens: float, context_tokens: float, setup: Setup = DEFAULT,
            tp: int = 1) -> float:
    """Simulated milliseconds of one decode step (no prefill), see the module docstring.

    seqs: running sequences B; tokens: query tokens verified (B + draft tokens);
    context_tokens: KV-cache tokens read (sum of prompt + generated over the batch).
    """
    if seqs <= 0:
        return 0.0
    tp = max(1, int(tp))
    bw = setup.mem_bw_gbps * 1e9 * setup.bw_eff * tp            # bytes/s over the TP group
    flops = setup.bf16_tflops * 1e12 * setup.mfu * tp
    t_weights = setup.weights_gib * GIB / bw * 1e3
    t_compute = 2 * setup.params * tokens / flops * 1e3
    t = T_FIXED_MS + (t_weights ** ROOFLINE_P + t_compute ** ROOFLINE_P) ** (1 / ROOFLINE_P)
    t += context_tokens * setup.kv_bytes_per_token / bw * 1e3
    t += T_SEQ_MS * seqs
    if tp > 1:  # two all-reduces per layer of tokens x hidden bf16 activations (ring: 2(tp-1)/tp)
        nbytes = tokens * setup.hidden * 2 * 2 * (tp - 1) / tp
        t += 2 * setup.layers * (setup.allreduce_us * 1e-3 + nbytes / (setup.nvlink_gbps * 1e9) * 1e3)
    if m.kind.startswith("ngram"):
        t += NGRAM_SYNC_MS + NGRAM_SEQ_MS * seqs
    elif m.kind == "eagle":
        d_bw = setup.drafter_gib * GIB / bw * 1e3
        d_compute = 2 * setup.drafter_gib * GIB / 2 * seqs / flops * 1e3
        t += m.k * (EAGLE_LAUNCH_MS + (d_bw ** ROOFLINE_P + d_compute ** ROOFLINE_P) ** (1 / ROOFLINE_P))
    t += SPEC_TOKEN_MS * max(0.0, tokens - seqs)
    return t


# ------------------------------------------------------------------ the pure function


Category = "str | dict | None"  # a Spec-Bench category, a mix {category: weight}, None: the report's mix


def _mix(category) -> dict:
    if isinstance(category, dict):
        total = float(sum(category.values())) or 1.0
        return {c: w / total for c, w in category.items() if w}
    return {category: 1.0}


def tpot_ms(m: Method, concurrency: int, category=None, output_len: int = REF_OUTPUT_LEN,
            setup: Setup = DEFAULT, tp: int = 1, prefill: bool = True) -> float:
    """Steady-state simulated mean TPOT (ms per output token) at `concurrency` (closed loop:
    `concurrency` requests in flight, each finished one replaced at once, so steps also carry the
    prefill of the requests admitted into them; prefill=False: decode steps only, as in a run whose
    requests move in lock-step waves, e.g. vanilla with num_prompts a multiple of concurrency).

    category: a name, None (the report's 16-prompt mix) or a mix {name: weight} (requests of
    each category share the batch: one step time, each request's own tokens per step; the
    mean over requests is what `vllm bench serve` reports as mean TPOT)."""
    b = max(1, min(int(concurrency), MAX_NUM_SEQS))
    mix = _mix(category)
    accs = {c: acceptance(m, c, output_len) for c in mix}
    draft_tokens = sum(w * accs[c].draft_freq * m.k for c, w in mix.items())
    context = sum(w * (PROMPT_TOKENS.get(c, MIX_PROMPT_TOKENS) + output_len / 2) for c, w in mix.items())
    step = step_ms(m, b, b * (1 + draft_tokens), b * context, setup, tp)
    # closed loop: a finished request is replaced at once, so each step admits E[k] requests
    steps_per_request = sum(w * output_len / accs[c].tokens_per_step for c, w in mix.items())
    admitted = b / max(1.0, steps_per_request)
    prompt = sum(w * PROMPT_TOKENS.get(c, MIX_PROMPT_TOKENS) for c, w in mix.items())
    if prefill:
        step += PREFILL_A_MS * min(1.0, admitted) + PREFILL_MS_PER_TOKEN * prompt * admitted
    return sum(w * step / accs[c].tokens_per_step for c, w in mix.items())


def prefill_ms(prompt_tokens: int) -> float:
    """Extra milliseconds of a step that admits requests with `prompt_tokens` in all."""
    return PREFILL_A_MS + PREFILL_MS_PER_TOKEN * prompt_tokens if prompt_tokens > 0 else 0.0


def speedup(method_name: str | Method, k: int = 0, concurrency: int = 1, category=None,
            output_len: int = REF_OUTPUT_LEN, *, prompt_lookup_min: int | None = None,
            prompt_lookup_max: int | None = None, tp: int = 1, setup: Setup = DEFAULT,
            prefill: bool = True) -> float:
    """TPOT(vanilla) / TPOT(method) at the same concurrency, category and output length (SIMULATED).

    method_name: "ngram" (lookup 2-128 unless given), "eagle3" or a Method (method_for(spec)).
    category: a Spec-Bench category, a mix {category: weight} (see dataset_mix) or None (the
    report's mix). > 1: speculation pays; it falls with concurrency and crosses 1.0 at crossover().
    """
    m = method_name if isinstance(method_name, Method) else method(method_name, k, prompt_lookup_min,
                                                                    prompt_lookup_max)
    van = tpot_ms(Method("vanilla"), concurrency, category, output_len, setup, tp, prefill)
    return van / tpot_ms(m, concurrency, category, output_len, setup, tp, prefill)


def dataset_mix(path: str, num_prompts: int, category: str | None = None) -> dict:
    """{category: count} of the prompts `vllm bench serve --dataset-name spec_bench` sends: the
    file filtered by `category`, shuffled with random.seed(0), the first num_prompts (oversampled
    duplicates with random.seed(0) + random.choice, as the loader does)."""
    import json
    import random

    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                if not category or row.get("category") == category:
                    rows.append(row.get("category"))
    random.seed(0)
    random.shuffle(rows)
    n = len(rows) if num_prompts <= 0 else num_prompts
    picked = rows[:n]
    if len(picked) < n and picked:
        random.seed(0)
        picked += [random.choice(picked) for _ in range(n - len(picked))]
    out: dict = {}
    for c in picked:
        out[c] = out.get(c, 0) + 1
    return out


def crossover(method_name: str | Method, k: int = 0, category=None,
              output_len: int = REF_OUTPUT_LEN, lo: float = 1, hi: float = MAX_NUM_SEQS,
              **kw) -> float | None:
    """The (real-valued) concurrency where speedup crosses 1.0 in [lo, hi]; None if it does not.

    Speedup is evaluated at integer batch sizes in the engine; here it is interpolated
    geometrically between the two integers that bracket 1.0.
    """
    f = lambda c: speedup(method_name, k, c, category, output_len, **kw)  # noqa: E731
    prev_c, prev_s = int(lo), f(int(lo))
    if prev_s <= 1.0:
        return None if prev_s < 1.0 else float(prev_c)
    for c in range(int(lo) + 1, int(hi) + 1):
        s = f(c)
        if s <= 1.0:
            w = (prev_s - 1.0) / (prev_s - s)
            return math.exp(math.log(prev_c) + w * (math.log(c) - math.log(prev_c)))
        prev_c, prev_s = c, s
    return None


def with_setup(**kw) -> Setup:
    """DEFAULT with some fields changed, e.g. with_setup(mem_bw_gbps=4800) for an H200."""
    return replace(DEFAULT, **kw)
