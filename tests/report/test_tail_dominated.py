"""A run whose throughput and TPOT speedups disagree is flagged tail-dominated (issue 12.2); the rule
reads the token-weighted TPOT and never fires at concurrency 1 (issue 23)."""
import math

import pandas as pd

from specfleet.report.tables.conclusions import tail_dominated


def row(config, tok_s, tpot_ms, conc=16, weighted=math.nan):
    return pd.Series({"config": config, "node": "w1", "output_tok_s": tok_s, "tpot_ms": tpot_ms,
                      "concurrency": conc, "tpot_weighted_ms": weighted})


def test_the_reports_ngram_at_16_is_tail_dominated():
    # the field report at concurrency 16: n-gram 0.95x on throughput, 0.998x on TPOT
    base = row("vanilla", 301.19, 50.0)
    msg = tail_dominated(row("ngram", 301.19 * 0.95, 50.0 / 0.998), base)
    assert msg and "tail-dominated" in msg and "0.950" not in msg   # the throughput figure is the matrix's
    assert "its 0.998x on token-weighted TPOT differ by more than 3 %" in msg


def test_agreeing_speedups_are_not_flagged():
    base = row("vanilla", 301.19, 50.0)
    assert tail_dominated(row("eagle3", 301.19 * 1.83, 50.0 / 1.80), base) is None


def test_never_at_concurrency_one_and_judged_on_the_token_weighted_tpot():
    # c=1: vLLM's unweighted mean TPOT disagrees with throughput by 6 %, but there is no wave
    assert tail_dominated(row("ngram", 22.83, 43.65 * 1.06, conc=1), row("vanilla", 21.29, 46.94, conc=1)) is None
    # c=16: the unweighted means disagree, the token-weighted TPOT agrees with throughput: not flagged
    base = row("vanilla", 300.0, 50.0, weighted=50.0)
    assert tail_dominated(row("x", 330.0, 50.0, weighted=50.0 / 1.10), base) is None
    assert tail_dominated(row("x", 330.0, 50.0 / 1.10, weighted=50.0), base) is not None
