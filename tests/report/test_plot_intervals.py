"""A speedup's point and its interval are one method (issue 23): the point is the ratio of geometric
means, the centre of the log-scale Welch interval, so it always lies inside it, and the plots draw
its error bars as they are (specfleet/report/tables/measures.py, plots.py)."""
import json
import math

import matplotlib
import pandas as pd
from hypothesis import HealthCheck, given, settings, strategies as st

from specfleet.report import report_campaign
from specfleet.report.render import plots

from campaign_builder import REPORT, result_json

matplotlib.use("Agg")

RUNS = st.lists(st.floats(min_value=1.0, max_value=5000.0, allow_nan=False), min_size=1, max_size=6)


def _write(root, base: list[float], cfg: list[float]):
    hdir = root / "w1"
    hdir.mkdir(parents=True)
    for name, vals in (("vanilla", base), ("x", cfg)):
        (hdir / f"{name}.done").write_text("")
        for k, v in enumerate(vals, 1):
            d = result_json((v, *REPORT[("w1", "vanilla", 16)][1:]), None, conc=16)
            (hdir / (f"{name}_conc16_r{k}.json" if len(vals) > 1 else f"{name}_conc16.json")).write_text(json.dumps(d))
    return root


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=RUNS, cfg=RUNS)
def test_the_speedup_point_lies_inside_its_interval(tmp_path_factory, base, cfg):
    # noisy samples with a point that a ratio of arithmetic means put outside the interval: e.g. base
    # [1, 1, 1000], cfg [1000, 1000, 1] (ratio of means 5.98x, Welch's log interval [0.001x, 1.46x])
    o = report_campaign(_write(tmp_path_factory.mktemp("c"), base, cfg), quiet=True)
    r = o.tables.runs.set_index("config").loc["x"]
    logs = sum(map(math.log, cfg)) / len(cfg) - sum(map(math.log, base)) / len(base)
    assert math.isclose(r.speedup, math.exp(logs), rel_tol=1e-12)   # the ratio of geometric means
    if len(base) > 1 and len(cfg) > 1:
        assert r.speedup_ci_low <= r.speedup * (1 + 1e-12) and r.speedup <= r.speedup_ci_high * (1 + 1e-12), r
        # the centre on the log scale
        assert math.isclose(math.log(r.speedup) - math.log(r.speedup_ci_low),
                            math.log(r.speedup_ci_high) - math.log(r.speedup), rel_tol=1e-9, abs_tol=1e-12)
    else:
        assert math.isnan(r.speedup_ci_low)


def test_a_wide_interval_that_the_old_point_left_is_drawn_as_it_is(tmp_path):
    # the crossover e2e's case (exit 70 once): the arithmetic ratio stood above the interval
    o = report_campaign(_write(tmp_path / "c", [100.0, 100.0, 160.0], [200.0, 130.0, 125.0]), quiet=True)
    r = o.tables.runs.set_index("config").loc["x"]
    assert (sum([200.0, 130.0, 125.0]) / sum([100.0, 100.0, 160.0])) != r.speedup
    below, above = plots._bar_err([r.speedup], [r.speedup_ci_low], [r.speedup_ci_high])
    assert below[0] > 0 and above[0] > 0
    assert math.isclose(r.speedup - below[0], r.speedup_ci_low) and math.isclose(r.speedup + above[0], r.speedup_ci_high)
    svg = plots.speedup_svg(o.tables.runs, "vanilla")
    assert svg is not None and "<svg" in svg


def test_crossover_plot_draws_the_interval_around_each_point():
    rows = [{"config": "ngram", "node": "w1", "cell": f"conc{c}", "concurrency": c, "speedup": s,
             "speedup_ci_low": lo, "speedup_ci_high": hi, "speedup_verdict": "faster"}
            for c, s, lo, hi in ((1, 1.30, 1.05, 1.61), (2, 1.2, 1.1, 1.3), (4, 1.0, 0.9, 1.1))]
    runs = pd.DataFrame(rows + [{**r, "config": "vanilla", "speedup": math.nan} for r in rows])
    svg = plots.crossover_svg(runs, "vanilla")
    assert svg is None or "<svg" in svg
    below, above = plots._bar_err([1.30, math.nan], [1.05, math.nan], [1.61, math.nan])
    assert [round(b, 6) for b in below] == [0.25, 0.0] and [round(a, 6) for a in above] == [0.31, 0.0]
