"""The report says what its repeats are, read from each result's repeat_isolation (issue 23):
the interval of independent server starts is not the interval of one server start."""
from __future__ import annotations

import json

from specfleet.report import report_campaign

from campaign_builder import REPORT, result_json, write_campaign


def _repeats(root, host, cfg, values, conc=16, isolation=None, first=1):
    base = REPORT[(host, cfg, conc)]
    for k, v in enumerate(values, first):
        meta = {"node": host, "config": cfg, "vllm_version": "0.28.0", "plan_hash": "abc123"}
        if isolation:
            meta["repeat_isolation"] = isolation
        (root / host / f"{cfg}_conc{conc}_r{k}.json").write_text(json.dumps(result_json((v, *base[1:]), conc=conc,
                                                                                        extra=meta)))
    (root / host / f"{cfg}_conc{conc}.json").unlink(missing_ok=True)


def _campaign(tmp_path, isolation):
    root = write_campaign(tmp_path / "c")
    _repeats(root, "w2", "vanilla", [306.0, 307.0, 306.5], isolation=isolation)
    _repeats(root, "w2", "eagle3", [562.0, 563.0, 561.0], isolation=isolation)
    return root


def test_server_start_repeats_say_their_interval_holds_server_start_and_drift_variance(tmp_path):
    o = report_campaign(_campaign(tmp_path, "server-start"), quiet=True)
    note = o.model.summary.note
    assert "Repeats: server-start, each repeat on its own server start" in note
    assert "server-start and slow-drift variance" in note and "run-to-run variance only" not in note
    results = [s for s in o.model.sections if s.title.startswith("Results")]
    assert results and all("Repeats: server-start" in s.note for s in results)
    assert "Repeats: server-start" in o.paths["md"].read_text()


def test_repeats_on_one_server_start_or_unrecorded_say_their_interval_leaves_that_out(tmp_path):
    for isolation in ("cache-reset", None):   # a result from before the field ran so
        o = report_campaign(_campaign(tmp_path / str(isolation), isolation), quiet=True)
        note = o.model.summary.note
        assert "Repeats: cache-reset" in note and "run-to-run variance only, not server-start or drift" in note


def test_gate_runs_added_as_server_starts_to_a_one_server_campaign_are_counted_each_way(tmp_path):
    root = _campaign(tmp_path, "cache-reset")
    _repeats(root, "w2", "vanilla", [306.2, 306.8], isolation="server-start", first=4)
    o = report_campaign(root, quiet=True)
    note = o.model.summary.note
    assert "isolated in more than one way" in note
    assert "6 runs cache-reset" in note and "2 runs server-start" in note
    r = o.tables.runs
    assert int(r[(r.config == "vanilla") & (r.node == "w2") & (r.concurrency == 16)].repeats.iloc[0]) == 5


def test_single_runs_carry_no_repeat_note(tmp_path):
    o = report_campaign(write_campaign(tmp_path / "c"), quiet=True)
    assert "Repeats:" not in o.model.summary.note and o.tables.repeats_note is None
