"""The drafter check in the report: each result of a drafter's configuration carries the worker's
findings (`drafter_check`); the report shows them in a provenance section and its warnings among the
conclusions, quoting the field report's rule."""
from __future__ import annotations

import json

from campaign_builder import write_campaign
from specfleet.report.build import report_campaign
from specfleet.worker.drafter import VERIFIER_RULE

WARNING = ("the drafter /mnt/Qwen3-32B-speculator.eagle3 was trained for verifier 'Qwen/Qwen3-14B', the served "
           f"model is 'Qwen3-32B': {VERIFIER_RULE}")


def test_a_verifier_warning_is_in_the_provenance_and_the_conclusions(tmp_path):
    camp = write_campaign(tmp_path / "c")
    for f in (camp / "w2").glob("eagle3_conc*.json"):
        d = json.loads(f.read_text())
        d["drafter_check"] = json.dumps({"warnings": [WARNING], "notes": []})
        f.write_text(json.dumps(d))
    out = report_campaign(camp, quiet=True)
    assert f"Drafter: eagle3 on w2: {WARNING}" in out.model.conclusions
    md = (camp / "report.md").read_text()
    assert "## Drafter checked against the model" in md
    assert f"| w2 | eagle3 | WARNING | {WARNING} |" in md
    assert "acceptance drops (field report §1.3)" in md


def test_no_drafter_check_no_section(tmp_path):
    camp = write_campaign(tmp_path / "c")
    report_campaign(camp, quiet=True)
    assert "Drafter checked" not in (camp / "report.md").read_text()
