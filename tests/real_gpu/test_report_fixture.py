"""specfleet's report on the real CUDA result files (tests/fixtures/vllm-0.26.0-cuda-h200), unchanged,
through testbed/realgpu/report.py: real numbers, labelled real GPU, with GPU/driver/torch provenance,
the decode bound from the GPU name, degenerate acceptance flagged."""
import json
from pathlib import Path

import pytest

from testbed.realgpu import report as rg

CUDA_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.26.0-cuda-h200"
ENV = CUDA_FIXTURES / "device-env.txt"


@pytest.fixture(scope="module")
def dummy8b(tmp_path_factory):
    out, camp = rg.report(CUDA_FIXTURES / "h200-dummy8b" / "h200", tmp_path_factory.mktemp("r"), env=ENV)
    return out, camp


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    return rg.report(CUDA_FIXTURES / "h200-smollm2" / "h200", tmp_path_factory.mktemp("r"), env=ENV)


def test_facts_from_env():
    f = rg.facts_from_env(ENV.read_text())
    assert f == {"gpu": "NVIDIA H200", "driver": "580.159.04", "engine": rg.ENGINE,
                 "torch_version": "2.11.0+cu130", "cuda_version": "13.0"}
    with pytest.raises(ValueError, match="no nvidia-smi"):
        rg.facts_from_env("torch 2.11.0 13.0 True\n")


def test_real_numbers_unchanged_and_not_simulated(dummy8b):
    out, camp = dummy8b
    assert out.merged and not out.simulated and not out.quarantined, out.error
    rows = {(r["config"], r["concurrency"]): r for r in json.loads((camp / "merged.json").read_text())}
    for (cfg, conc), r in rows.items():
        d = json.loads((CUDA_FIXTURES / "h200-dummy8b" / "h200" / f"{cfg}_conc{conc}.json").read_text())
        assert r["output_tok_s"] == pytest.approx(d["output_throughput"], rel=1e-14)
        assert r["tpot_ms"] == pytest.approx(d["mean_tpot_ms"], rel=1e-14)
    assert rows[("vanilla", 1)]["output_tok_s"] == pytest.approx(193.77, abs=0.01)
    md = (camp / "report.md").read_text()
    assert "SIMULATED" not in md
    assert "| h200 | vLLM 0.26.0, vllm-cuda (real GPU) | 0.26.0 | 2.11.0+cu130 | NVIDIA H200 | not recorded " \
           "| 580.159.04 | 13.0 |" in md   # provenance row (no provenance.json among the fixtures: GPU count)
    assert "Real GPU, not simulated: NVIDIA H200" in md


def test_decode_bound_from_the_gpu_name(dummy8b):
    out, camp = dummy8b
    # 13.70 GiB of weights from the real server log, 4800 GB/s for "NVIDIA H200": no flag given
    assert out.tables.min_tpot_ms == pytest.approx(13.70 * 2**30 / 4800e9 * 1000, rel=1e-3)
    md = (camp / "report.md").read_text()
    assert "## Memory-bandwidth bound" in md
    assert "vanilla at concurrency 1: TPOT 4.99 ms = 0.61 of the bound." in md


def test_random_weights_and_degenerate_acceptance_flagged(dummy8b):
    md = (dummy8b[1] / "report.md").read_text()
    assert "Weights: RANDOM" in md
    # every request loops (read from generated_texts, measures.loop_share): the flag says so
    assert ("Acceptance: concurrency 1: **ngram_improved** on h200: DEGENERATE ACCEPTANCE, not a speedup: 100 % of its "
            "requests loop (the tail of the generated text repeats one phrase; 100.0 % of drafted tokens "
            "accepted)") in md


def test_real_small_model_real_acceptance_and_slowdowns(smollm2):
    out, camp = smollm2
    assert out.merged and not out.simulated
    md = (camp / "report.md").read_text()
    assert "Weights: real" in md and "DEGENERATE" not in md
    rows = {(r["config"], r["concurrency"]): r for r in json.loads((camp / "merged.json").read_text())}
    assert rows[("ngram", 1)]["acceptance_rate_pct"] == pytest.approx(61.1, abs=0.05)
    assert rows[("ngram", 1)]["acceptance_length"] == pytest.approx(4.66, abs=0.005)
    assert rows[("ngram", 1)]["speedup"] == pytest.approx(0.57, abs=0.005)
    assert rows[("ngram_improved", 16)]["speedup"] == pytest.approx(0.86, abs=0.005)
    assert "| ngram | 0.57x (1 run) slower |" in md                     # the verdict: the summary matrix
    assert "Why slower: concurrency 1: **ngram** on h200: " in md and "0.572" not in md
    assert "decode is far from memory-bound" in md


def test_no_conclusion_calls_a_slower_configuration_best(smollm2):
    out, camp = smollm2
    rows = json.loads((camp / "merged.json").read_text())
    assert all(r["speedup"] < 1 for r in rows if r["config"] != "vanilla")   # every configuration is slower
    assert not [c for c in out.conclusions if "(best)" in c], out.conclusions   # no TTFT cost of a best one
    assert not [row for row in out.model.summary.rows if "best" in " ".join(row)]


def test_the_wrapper_keeps_no_acceptance_rule_of_its_own():
    """The rule lives in the core (specfleet.report.tables.measures.acceptance_flag), once."""
    assert not [n for n in ("degenerate", "near_zero", "mark_conclusions", "DEGENERATE_RATE_PCT",
                            "NEAR_ZERO_RATE_PCT") if hasattr(rg, n)]
    rows = [{"config": "eagle3", "concurrency": 1, "acceptance_rate_pct": 0.4, "acceptance_length": 1.01, "tpot_ms": 6.0}]
    assert "ACCEPTANCE" not in rg.gpu_section(rows, "NVIDIA H200", None, None, None, True)
