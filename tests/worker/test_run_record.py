"""The run record (specfleet.worker.record.RunRecord): what the worker writes beside each result, its
round trip and its refusals, and the runner writing one per result (fake vllm, as test_runner.py)."""
from __future__ import annotations

import json

import pytest

from specfleet.worker.record import RECORD_VERSION, RecordError, RunCell, RunRecord
from specfleet.worker.runner import EXIT_OK


def record(**kw) -> RunRecord:
    base = dict(node="w1", configuration="eagle3", result_file="eagle3_conc16-out512_r2.json",
                cell=RunCell("conc16-out512", 16, 512, None, None, 32), repeat=2, repeats=3,
                isolation="server-start", engine={"name": "vllm", "version": "0.32.0", "simulated": False},
                serve_argv=["vllm", "serve", "/m", "--speculative-config", '{"method": "eagle3"}'],
                gpus=[{"index": 0, "uuid": "GPU-a", "name": "NVIDIA H200"}], prompts_dropped=[7])
    return RunRecord(**{**base, **kw})


def test_a_record_survives_json_and_back():
    r = record()
    assert RunRecord.from_json(json.loads(json.dumps(r.to_json()))) == r
    assert r.to_json()["record_version"] == RECORD_VERSION
    # a word with a space stays one word: the argv is a list, not a line
    assert RunRecord.from_json(r.to_json()).serve_argv[-1] == '{"method": "eagle3"}'


@pytest.mark.parametrize("change, field", [
    (lambda d: d.pop("node"), "node"),
    (lambda d: d["cell"].update(concurrency="16"), "cell.concurrency"),
    (lambda d: d["cell"].update(concurrency=True), "cell.concurrency"),   # a bool is not a count
    (lambda d: d.update(repeat=1.5), "repeat"),
    (lambda d: d.update(serve_argv="vllm serve /m"), "serve_argv"),
    (lambda d: d.update(surprise=1), "surprise"),
    (lambda d: d["cell"].update(extra="x"), "cell.extra"),
    (lambda d: d.update(cell=[16]), "cell"),
    (lambda d: d.update(record_version=RECORD_VERSION + 1), "record_version"),
])
def test_a_malformed_record_is_refused_naming_its_field(change, field):
    d = record().to_json()
    change(d)
    with pytest.raises(RecordError) as e:
        RunRecord.from_json(d)
    assert e.value.field == field and str(e.value).startswith(f"field '{field}': ") and "\n" not in str(e.value)


def test_not_an_object_is_refused():
    with pytest.raises(RecordError, match="top level"):
        RunRecord.from_json([1])


def test_the_runner_writes_a_record_beside_each_result(bed):
    plan = bed.plan(benchmark={"repeat": 2, "repeat_isolation": "cache-reset"})
    assert bed.run(bed.spec(plan, queue=["vanilla"])) == EXIT_OK, bed.log()
    st = bed.state()
    starts = set()
    for rep in (1, 2):
        for conc in (1, 16):
            name = f"vanilla_conc{conc}_r{rep}.json"
            assert (bed.run_dir / name).is_file()
            rec = RunRecord.from_json(json.loads((bed.run_dir / f"vanilla_conc{conc}_r{rep}.record.json").read_text()))
            assert (rec.node, rec.configuration, rec.result_file) == ("w1", "vanilla", name)
            assert (rec.cell.name, rec.cell.concurrency, rec.repeat, rec.repeats) == (f"conc{conc}", conc, rep, 2)
            assert rec.isolation == "cache-reset" and rec.run_id == st["run_id"] and rec.plan_hash == st["plan_hash"]
            assert rec.engine == st["engine"] and rec.engine["simulated"] is True
            assert rec.serve_argv[1:3] == ["serve", st["model_path"]] and rec.decoding == "greedy"
            assert rec.sampling_sent == {"temperature": 0.0} and rec.prompts_dropped == []
            assert rec.bench_started_at <= rec.bench_finished_at
            starts.add(rec.server_start)
    assert len(starts) == 1  # cache-reset: every repeat on one server start, and the record says so
