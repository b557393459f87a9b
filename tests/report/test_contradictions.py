"""A result whose fields contradict each other is quarantined with the reason, never merged (issue 23)."""
from __future__ import annotations

import json

import pytest

from specfleet.report.scan.folder import scan_folder

from campaign_builder import write_campaign


@pytest.mark.parametrize("change,why", [
    ({"completed": 17}, "completed 17 + failed 0 > num_prompts 16"),
    ({"latencies": [1.0, -0.5]}, "'latencies' holds a negative duration"),
    ({"ttfts": [0.1, -0.2]}, "'ttfts' holds a negative duration"),
    ({"spec_decode_accepted_tokens": -3}, "spec_decode_accepted_tokens is -3"),
    ({"spec_decode_accepted_tokens": 5000}, "spec_decode_accepted_tokens 5000 > spec_decode_draft_tokens"),
    ({"spec_decode_per_position_acceptance_rates": [0.3, 0.5]}, "rises at position 1"),
])
def test_contradicting_fields_are_quarantined(tmp_path, change, why):
    root = write_campaign(tmp_path / "c")
    f = root / "w1" / "ngram_conc16.json"
    d = json.loads(f.read_text())
    d.update(change)
    f.write_text(json.dumps(d))
    camp = scan_folder(root)
    [q] = camp.quarantined
    assert q.source == f and "fields contradict each other" in q.reason and why in q.reason, q.reason
    assert ("w1", "ngram", 16) not in {(r.host, r.config, r.conc) for r in camp.runs}
    assert (root / "quarantine" / "w1" / "ngram_conc16.json.reason.txt").read_text().strip() == q.reason
