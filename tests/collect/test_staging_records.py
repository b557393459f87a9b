"""Collect's staging with run records (worker/record.RunRecord): a fetched record travels with its
result and is judged with it; a malformed one is refused with its result, the local pair stays."""
from __future__ import annotations

import json

from specfleet.collect.staging import accept, fresh_staging
from specfleet.worker.record import RunCell, RunRecord

from tests.collect.test_staging import EXPECT, good

RECORD = RunRecord(node="w1", configuration="vanilla", result_file="vanilla_conc1.json",
                   cell=RunCell("conc1", 1, 512, None, None, 16)).to_json()


def test_a_valid_record_replaces_its_local_copy_with_its_result(tmp_path):
    camp = tmp_path / "c"
    stage = fresh_staging(camp, "w1")
    (stage / "vanilla_conc1.json").write_text(good())
    (stage / "vanilla_conc1.record.json").write_text(json.dumps(RECORD))
    got = accept(camp, "w1", EXPECT)
    assert got.refused == [] and sorted(got.replaced) == ["vanilla_conc1.json", "vanilla_conc1.record.json"]


def test_a_malformed_record_is_refused_with_its_result_and_the_local_pair_stays(tmp_path):
    camp = tmp_path / "c"
    (camp / "w1").mkdir(parents=True)
    (camp / "w1" / "vanilla_conc1.json").write_text(good())
    (camp / "w1" / "vanilla_conc1.record.json").write_text(json.dumps(RECORD))
    stage = fresh_staging(camp, "w1")
    (stage / "vanilla_conc1.json").write_text(good(values=(1.0, 2.0, 3.0, 4.0, 5.0, 6.0)))
    (stage / "vanilla_conc1.record.json").write_text(json.dumps({**RECORD, "repeat": "1"}))
    got = accept(camp, "w1", EXPECT)
    [msg] = got.refused
    assert "vanilla_conc1.record.json: not a run record: field 'repeat': expected int" in msg
    assert "valid copy collected earlier is kept" in msg and got.replaced == []
    assert (camp / "w1" / "vanilla_conc1.json").read_text() == good()
    assert json.loads((camp / "w1" / "vanilla_conc1.record.json").read_text()) == RECORD


def test_an_unchanged_local_record_judges_a_fetched_result(tmp_path):
    # --compare-dest leaves an unchanged record unfetched: the local one is the result's record
    camp = tmp_path / "c"
    (camp / "w1").mkdir(parents=True)
    (camp / "w1" / "vanilla_conc1.record.json").write_text(json.dumps({**RECORD, "node": "w2"}))
    stage = fresh_staging(camp, "w1")
    (stage / "vanilla_conc1.json").write_text(good())
    [msg] = accept(camp, "w1", EXPECT).refused
    assert "its run record says node 'w2', its folder 'w1'" in msg


def test_collect_fetches_a_finished_items_records_with_its_results():
    from specfleet.collect.fetch import wanted
    assert wanted("vanilla_conc1_r2.record.json", ["vanilla"])
    assert wanted("vanilla_conc16-out512-cat_rag.record.json", ["vanilla"])
    assert not wanted("ngram_conc1.record.json", ["vanilla"])   # an unfinished item's: not yet
