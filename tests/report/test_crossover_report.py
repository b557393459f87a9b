"""The report's crossover statement and curve (specfleet/report/tables/crossover_curve.py, plots.crossover_svg)."""
import json
import re

from specfleet.report import report_campaign

from campaign_builder import REPORT, result_json

BASE = REPORT[("w1", "vanilla", 16)]


def write(root, curve: dict[int, float], reps=3, jitter=0.004, extra=None):
    """w1: vanilla and eagle3 at each concurrency of `curve` (speedup), `reps` runs each, with a
    fixed +-jitter pattern so the intervals are real and reproducible."""
    h = root / "w1"
    h.mkdir(parents=True)
    pattern = [1 + jitter, 1 - jitter, 1.0][:reps]
    for conc, s in curve.items():
        for cfg, f in (("vanilla", 1.0), ("eagle3", s)):
            for k, j in enumerate(pattern, 1):
                vals = (BASE[0] * conc / 16 * f * j, BASE[1] * conc / 16 * f * j, *BASE[2:])
                meta = {"node": "w1", "config": cfg, "vllm_version": "0.28.0", "plan_hash": "abc123",
                        **(extra or {})}
                (h / f"{cfg}_conc{conc}_r{k}.json").write_text(json.dumps(result_json(vals, None, conc, meta)))
            (h / f"{cfg}.done").write_text("")
    return root


def line(o):
    found = [c for c in o.conclusions if c.startswith("Across concurrencies: Crossover of **eagle3** on w1")]
    assert len(found) == 1, o.conclusions
    return found[0]


def test_pays_then_no_difference_then_loses(tmp_path):
    curve = {1: 2.1, 4: 1.9, 16: 1.3, 23: 1.004, 32: 0.997, 45: 0.9, 64: 0.8}
    o = report_campaign(write(tmp_path / "c", curve), quiet=True)
    s = line(o)
    assert "pays up to concurrency 16 (c=16: 1.300x, interval [" in s
    assert "no measurable difference between 16 and 45 (measured at 23, 32)" in s
    assert "loses from concurrency 45 (c=45: 0.900x, interval [" in s
    assert "95 % CI, Welch's t on log values, n=3/3" in s
    assert "crosses 1.00x between concurrency 23 (1.004x) and 32 (0.997x)" in s
    assert "Measured at 1, 4, 16, 23, 32, 45, 64" in s
    html = (tmp_path / "c" / "report.html").read_text()
    assert 'aria-label="Crossover"><svg' in html  # the plot's text is drawn as paths
    assert "Crossover of **eagle3**" in (tmp_path / "c" / "report.md").read_text()


def test_pays_everywhere_and_loses_everywhere(tmp_path):
    s = line(report_campaign(write(tmp_path / "a", {1: 2.0, 16: 1.6, 64: 1.2}), quiet=True))
    assert "pays at every concurrency measured (lowest: c=64: 1.200x" in s
    s = line(report_campaign(write(tmp_path / "b", {1: 0.9, 16: 0.8, 64: 0.7}), quiet=True))
    assert "loses at every concurrency measured (highest: c=1: 0.900x" in s


def test_single_runs_say_so_and_non_monotone_is_named(tmp_path):
    s = line(report_campaign(write(tmp_path / "a", {1: 1.5, 8: 0.9, 32: 1.5, 64: 0.8}, reps=1), quiet=True))
    assert s.count("single run: plain threshold, no interval") == 0  # not monotone: segments, not edges
    assert "not monotone in concurrency: faster at 1; slower at 8; faster at 32; slower at 64" in s
    s = line(report_campaign(write(tmp_path / "b", {1: 1.5, 8: 1.2, 32: 0.9}, reps=1), quiet=True))
    assert "pays up to concurrency 8 (c=8: 1.200x; single run: plain threshold, no interval" in s
    assert "nothing measured between the two" in s and "loses from concurrency 32" in s


def test_two_concurrencies_give_no_crossover_statement(tmp_path):
    o = report_campaign(write(tmp_path / "c", {1: 2.0, 16: 0.9}), quiet=True)
    assert not [c for c in o.conclusions if "Crossover of" in c]
    assert 'aria-label="Crossover"' not in (tmp_path / "c" / "report.html").read_text()


def test_simulated_curve_is_stamped(tmp_path):
    root = write(tmp_path / "c", {1: 2.0, 16: 1.5, 64: 0.9}, extra={"simulated": True, "engine": "specfleet-simvllm"})
    report_campaign(root, quiet=True)
    html = (root / "report.html").read_text()
    svgs = re.findall(r"<svg.*?</svg>", html, re.S)
    assert 'aria-label="Crossover"' in html and svgs and all("<title>SIMULATED ENGINE: not a measurement</title>" in s for s in svgs)


def test_the_statement_says_why_the_nodes_search_stopped(tmp_path):
    root = write(tmp_path / "c", {1: 2.0, 16: 1.5, 64: 0.9})
    why = "budget spent (3 of 3 concurrencies measured)"
    (root / "w1" / "state.json").write_text(json.dumps({
        "schema": 1, "host": "w1", "status": "done", "items": [],
        "crossover": {"round": 2, "configs": {"eagle3": {"points": {}, "next": [], "why": why}}}}))
    s = line(report_campaign(root, quiet=True))
    assert s.endswith(f"The node's crossover search: {why}.")


def test_point_verdicts_along_the_sweep_are_corrected_by_holm(tmp_path):
    """Issue 39: seven points at 95 % each call some no-difference point faster or slower far more often
    than 5 %; the curve's point verdicts are corrected by Holm over its points. c=8 at 1.04x is faster
    alone (p ~ 0.02 with 3 runs) but not after Holm over 7 points; the clear gains at 1 and 4 stay."""
    curve = {1: 2.0, 4: 1.8, 8: 1.04, 16: 1.01, 32: 0.99, 64: 0.98, 128: 0.985}
    o = report_campaign(write(tmp_path / "c", curve, jitter=0.0128), quiet=True)
    runs = o.tables.runs
    c8 = runs[(runs.config == "eagle3") & (runs.concurrency == 8)].iloc[0]
    assert c8.speedup_verdict == "faster" and 0.01 < c8.speedup_p < 0.05    # the point alone
    s = line(o)
    assert "pays up to concurrency 4 (c=4: 1.800x" in s
    assert "no measurable difference between 4 and 128 (measured at 8, 16, 32, 64, 128)" in s
    assert "Point verdicts corrected by Holm over the curve's points (family-wise 0.05): c=8 faster alone" in s
    assert "not after Holm over the 7 points" in s
