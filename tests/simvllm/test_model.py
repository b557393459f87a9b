"""The simulated engine's performance model (testbed/simvllm/vllm/model.py): pure functions."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "testbed" / "simvllm"))
from vllm import model as M  # noqa: E402
from tests.shared_data import SPEC_BENCH

SAMPLE = Path(__file__).resolve().parents[2] / "datasets" / "sample" / "question.jsonl"
CONCS = [1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256]


@pytest.mark.parametrize("name,k", [("ngram", 4), ("ngram", 6), ("eagle3", 3), ("eagle3", 5)])
def test_speedup_falls_with_concurrency_and_tpot_grows(name, k):
    s = [M.speedup(name, k, c) for c in CONCS]
    assert all(a > b for a, b in zip(s, s[1:])), s
    m = M.method(name, k)
    for meth in (m, M.Method("vanilla")):
        t = [M.tpot_ms(meth, c) for c in CONCS]
        assert all(a < b for a, b in zip(t, t[1:])), t


def test_crossover_exists_in_1_256_and_differs_by_method():
    ng, ea = M.crossover("ngram", 4), M.crossover("eagle3", 3)
    assert ng is not None and ea is not None and 1 < ng < ea < 256
    assert ea / ng > 1.5  # one grid step (x2) apart at least at the coarse end
    # the crossover brackets 1.0
    assert M.speedup("ngram", 4, int(ng)) > 1.0 > M.speedup("ngram", 4, int(ng) + 1)
    assert M.speedup("eagle3", 3, int(ea)) > 1.0 > M.speedup("eagle3", 3, int(ea) + 1)


def test_ngram_accepts_more_where_output_copies_input():
    mix = M.acceptance(M.method("ngram", 4)).tokens_per_step
    for cat in ("summarization", "rag"):
        acc = M.acceptance(M.method("ngram", 4), cat)
        assert acc.tokens_per_step > 1.3 * mix
        assert M.crossover("ngram", 4, cat) > 1.5 * M.crossover("ngram", 4)
    for cat in ("translation", "writing", "roleplay"):
        assert M.acceptance(M.method("ngram", 4), cat).tokens_per_step < mix


def test_eagle_is_less_category_dependent_than_ngram():
    def spread(name, k):
        vals = [M.acceptance(M.method(name, k), c).tokens_per_step for c in M.CATEGORIES]
        return max(vals) / min(vals)
    assert spread("eagle3", 3) < 1.25 < spread("ngram", 4)


def test_k_effect_acceptance_per_position_decays_and_cost_grows():
    for name in ("ngram", "eagle3"):
        accs = {k: M.acceptance(M.method(name, k)) for k in (1, 2, 3, 5, 8)}
        for k, acc in accs.items():
            assert len(acc.per_pos) == k
            assert all(a >= b for a, b in zip(acc.per_pos, acc.per_pos[1:]))
        # more positions: more accepted tokens per draft, each extra position adds less
        gains = [accs[b].mean_accepted - accs[a].mean_accepted for a, b in ((1, 2), (2, 3), (3, 5))]
        assert all(g > 0 for g in gains) and gains[0] > gains[1]
    eagle = [M.step_ms(M.method("eagle3", k), 64, 64 * (1 + k), 64 * 400) for k in (1, 3, 5, 8)]
    assert all(a < b for a, b in zip(eagle, eagle[1:]))
    # larger k pays at low concurrency, loses earlier at high concurrency
    assert M.speedup("eagle3", 5, 1) > M.speedup("eagle3", 3, 1) > M.speedup("eagle3", 1, 1)
    one = M.crossover("eagle3", 1)
    assert M.crossover("eagle3", 8) < M.crossover("eagle3", 3) < (one if one is not None else 257)


def test_output_length_moves_ngram_acceptance_up_and_tpot_up():
    short, long_ = (M.acceptance(M.method("ngram", 4), None, n) for n in (256, 2048))
    assert long_.draft_freq > short.draft_freq
    v = M.Method("vanilla")
    assert M.tpot_ms(v, 64, None, 2048) > M.tpot_ms(v, 64, None, 256)  # a longer KV cache to read


def test_tensor_parallel_is_faster_but_not_linear():
    v = M.Method("vanilla")
    t1, t2, t4 = (M.tpot_ms(v, 16, tp=t) for t in (1, 2, 4))
    assert t1 > t2 > t4 and t1 / t2 < 2.0 and t2 / t4 < 2.0


def test_the_model_reproduces_the_report_without_fitting():
    """Field report §4.1 TPOT (ms) at concurrency 1 and 16: the model is within 6 % (docs/engines.md)."""
    report = {("vanilla", 0): (46.94, 51.65), ("ngram", 4): (39.56, 44.73), ("eagle3", 3): (22.23, 25.33)}
    for (name, k), (t1, t16) in report.items():
        m = M.method(name, k)
        assert M.tpot_ms(m, 1) == pytest.approx(t1, rel=0.06)
        assert M.tpot_ms(m, 16) == pytest.approx(t16, rel=0.06)


def test_method_for_maps_speculative_configs():
    assert M.method_for(None).kind == "vanilla"
    assert M.method_for({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
                         "prompt_lookup_max": 128}).kind == "ngram_wide"
    assert M.method_for({"method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_min": 4,
                         "prompt_lookup_max": 6}).kind == "ngram_narrow"
    assert M.method_for({"method": "eagle3", "model": "/m", "num_speculative_tokens": 5}) == M.Method("eagle", 5)


def test_dataset_mix_follows_the_loader_and_the_report_mix():
    if not SPEC_BENCH.exists():
        pytest.skip(f"{SPEC_BENCH} (the full Spec-Bench file) is not on this machine")
    assert M.dataset_mix(str(SPEC_BENCH), 16) == M.REPORT_MIX  # the anchors' mix is the report's
    assert M.dataset_mix(str(SPEC_BENCH), 0, "rag") == {"rag": 80}
    assert sum(M.dataset_mix(str(SPEC_BENCH), 1000).values()) == 1000  # oversampled as the loader does
    mix = M.dataset_mix(str(SAMPLE), 0)
    assert M.speedup("ngram", 4, 1, mix) != M.speedup("ngram", 4, 1)
