"""vLLM 0.34 changed the prompts `vllm bench serve --backend openai-chat` sends (its client no longer
chat-templates them; up to 0.33 the client templates and the server templates again): the same flags,
other prompts. Each run's template is recorded (run record, else the result's release read from its
wheel); the report's merge of nodes and `fab compare` refuse to call runs across the change one
workload, in one line naming both releases and the template behaviour. Result files: the real vLLM
0.32.0 result (tests/fixtures/vllm-0.32.0-cpu) relabelled 0.33.0 / 0.34.0 as its metadata names."""
from __future__ import annotations

import json

import pytest

from campaign_builder import REPORT, write_campaign
from compare_builder import campaign, plan_raw
from specfleet.errors import UserError
from specfleet.report import report_campaign
from specfleet.report.compare.comparison import compare_dirs
from specfleet.worker.record import RunCell, RunRecord

GREEDY = {"sampling_params": '{"temperature":0.0}', "decoding": "greedy"}
ACROSS = (r"client \+ server \(double\) under vLLM 0\.33\.0.*server only \(single\) under vLLM 0\.34\.0")


def _nodes(tmp_path, versions: dict[str, str]):
    root = tmp_path / "c"
    for host, v in versions.items():
        write_campaign(root, {k: x for k, x in REPORT.items() if k[0] == host}, extra={**GREEDY, "vllm_version": v})
    return root


def test_nodes_on_either_side_of_the_template_change_are_not_merged(tmp_path):
    o = report_campaign(_nodes(tmp_path, {"w1": "0.33.0", "w2": "0.34.0"}), quiet=True)
    assert not o.merged and o.exit_code == 8
    line = next(p for p in o.gate.problems if p.startswith("prompt template differs across nodes"))
    assert "client + server (double) under vLLM 0.33.0 (w1); server only (single) under vLLM 0.34.0 (w2)" in line
    assert "\n" not in line
    table = o.tables.provenance_results
    assert set(table[table.node == "w2"].chat_template) == {"server only (single)"}


def test_releases_that_template_alike_raise_no_template_line(tmp_path):
    o = report_campaign(_nodes(tmp_path, {"w1": "0.32.0", "w2": "0.33.0"}), quiet=True)
    assert not any(p.startswith("prompt template") for p in o.gate.problems)  # the vLLM line says the rest
    assert set(o.tables.provenance_results.chat_template) == {"client + server (double)"}


def test_the_run_record_is_what_the_worker_knew(tmp_path):
    """A record's chat_template is the worker's word, whatever release the result names."""
    root = _nodes(tmp_path, {"w1": "0.33.0", "w2": "0.33.0"})
    for f in sorted((root / "w2").glob("*.json")):
        if f.name.endswith(".record.json") or f.name == "provenance.json":
            continue
        cfg, conc = f.stem.split("_conc")
        rec = RunRecord(node="w2", configuration=cfg, result_file=f.name, cell=RunCell(f"conc{conc}", int(conc)),
                        chat_template="server")
        f.with_name(f.stem + ".record.json").write_text(json.dumps(rec.to_json()))
    o = report_campaign(root, quiet=True)
    assert any("server only (single) under vLLM 0.33.0 (w2)" in p for p in o.gate.problems), o.gate.problems


def test_compare_across_the_template_change_is_refused(tmp_path):
    base = campaign(tmp_path / "old", plan_raw(), seed=1, vllm="0.33.0")
    cand = campaign(tmp_path / "new", plan_raw(), seed=2, vllm="0.34.0")
    with pytest.raises(UserError, match="different prompt templates: " + ACROSS):
        compare_dirs(base, cand)
    assert compare_dirs(base, cand, force=True).forced
    # 0.32 -> 0.33: the same prompts; compared
    same = campaign(tmp_path / "mid", plan_raw(), seed=3, vllm="0.32.0")
    assert not compare_dirs(same, base).forced
