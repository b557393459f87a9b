"""A run whose throughput and TPOT speedups disagree is flagged tail-dominated (issue 12.2)."""
import pandas as pd

from specfleet.results.conclusions import tail_dominated


def row(config, tok_s, tpot_ms):
    return pd.Series({"config": config, "node": "w1", "output_tok_s": tok_s, "tpot_ms": tpot_ms})


def test_the_reports_ngram_at_16_is_tail_dominated():
    # the field report at concurrency 16: n-gram 0.95x on throughput, 0.998x on TPOT
    base = row("vanilla", 301.19, 50.0)
    msg = tail_dominated(row("ngram", 301.19 * 0.95, 50.0 / 0.998), base)
    assert msg and "tail-dominated" in msg and "0.950x on output throughput" in msg and "0.998x on TPOT" in msg


def test_agreeing_speedups_are_not_flagged():
    base = row("vanilla", 301.19, 50.0)
    assert tail_dominated(row("eagle3", 301.19 * 1.83, 50.0 / 1.80), base) is None
