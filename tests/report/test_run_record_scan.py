"""The report reads what each run was from its run record (worker/record.RunRecord), not from the
file's name; a result without one goes through the legacy converter (resultfile/legacy.py); a
malformed or foreign record is refused in one line, never merged."""
from __future__ import annotations

import json
import shlex

from specfleet.report.gates.consistency import result_table
from specfleet.report.scan.folder import scan_folder
from specfleet.report.tables.measures import repeat_meaning
from specfleet.resultfile.check import Expect
from specfleet.worker.record import RunCell, RunRecord

from tests.report.campaign_builder import REPORT, result_json

ARGV = ["vllm", "serve", "/models/m", "--port", "8000", "--speculative-config", '{"method": "ngram", "k": 4}']


def put(host_dir, name, conc=16, record: RunRecord | dict | None = None, **meta):
    host_dir.mkdir(parents=True, exist_ok=True)
    d = result_json(REPORT[("w1", "vanilla", 16 if conc == 16 else 1)], conc=conc,
                    extra={"node": host_dir.name, "config": "vanilla", **meta})
    (host_dir / name).write_text(json.dumps(d))
    if record is not None:
        rj = record.to_json() if isinstance(record, RunRecord) else record
        (host_dir / (name.removesuffix(".json") + ".record.json")).write_text(json.dumps(rj))
    (host_dir / "vanilla.done").write_text("{}")


def rec(name, node="w1", conc=16, **kw) -> RunRecord:
    return RunRecord(node=node, configuration="vanilla", result_file=name,
                     cell=RunCell(f"conc{conc}-out512", conc, 512, None, None, 16), **kw)


def test_the_cell_comes_from_the_record_and_the_name_is_only_a_name(tmp_path):
    put(tmp_path / "w1", "run-0001.json", record=rec("run-0001.json", repeat=2, repeats=2, isolation="server-start"))
    put(tmp_path / "w1", "run-0002.json", record=rec("run-0002.json", repeat=1, repeats=2, isolation="server-start"))
    camp = scan_folder(tmp_path, quarantine=False, expect=Expect(num_prompts=16))
    assert not camp.quarantined and not camp.warnings
    got = sorted((r.config, r.cell, r.conc, r.repeat) for r in camp.runs)
    assert got == [("vanilla", "conc16-out512", 16, 1), ("vanilla", "conc16-out512", 16, 2)]
    # the isolation the record says, where the metadata says none (no default inferred)
    assert repeat_meaning(camp).startswith("Repeats: server-start")


def test_a_result_without_record_reads_through_the_legacy_converter(tmp_path):
    put(tmp_path / "w1", "vanilla_conc16_r1.json")
    put(tmp_path / "w1", "vanilla_conc16_r2.json")
    camp = scan_folder(tmp_path, quarantine=False, expect=Expect(num_prompts=16))
    assert sorted((r.cell, r.repeat) for r in camp.runs) == [("conc16", 1), ("conc16", 2)]
    assert all(r.record.result_file == r.path.name for r in camp.runs)
    assert repeat_meaning(camp).startswith("Repeats: cache-reset")  # older results: one server start


def test_a_malformed_record_is_refused_in_one_line_naming_file_and_field(tmp_path):
    bad = rec("vanilla_conc16.json").to_json()
    bad["cell"]["concurrency"] = "16"
    put(tmp_path / "w1", "vanilla_conc16.json", record=bad)
    camp = scan_folder(tmp_path, quarantine=True, expect=Expect(num_prompts=16))
    assert camp.runs == []
    [q] = camp.quarantined
    assert q.reason == ("vanilla_conc16.record.json: not a run record: field 'cell.concurrency': expected int, "
                        'got "16"')
    assert (tmp_path / "quarantine" / "w1" / "vanilla_conc16.json").is_file()


def test_a_record_of_another_node_or_file_is_a_copy(tmp_path):
    put(tmp_path / "w1", "vanilla_conc16.json", record=rec("vanilla_conc16.json", node="w2"), node="w1")
    put(tmp_path / "w1", "vanilla_conc1.json", conc=1, record=rec("vanilla_conc16.json", conc=1))
    camp = scan_folder(tmp_path, quarantine=False, expect=Expect(num_prompts=16))
    assert camp.runs == []
    reasons = sorted(q.reason for q in camp.quarantined)
    assert reasons == ["its run record says node 'w2', its folder 'w1': a copy of another node's result",
                       "vanilla_conc1.record.json records the run of 'vanilla_conc16.json': a copy of another "
                       "run's record"]


def test_the_server_argv_is_the_records_list_not_a_line_split_on_spaces(tmp_path):
    put(tmp_path / "w1", "vanilla_conc16.json", record=rec("vanilla_conc16.json", serve_argv=ARGV))
    # the log's header says another (older) start: the record is what this run had
    (tmp_path / "w1" / "vanilla.server.log").write_text("==== specfleet 2026 run r: vllm serve /other --port 1\n")
    camp = scan_folder(tmp_path, quarantine=False, expect=Expect(num_prompts=16))
    row = result_table(camp).iloc[0]
    assert row["server_argv"] == shlex.join(ARGV)
    assert row["speculative_config"] == '{"method": "ngram", "k": 4}'
