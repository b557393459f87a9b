"""`fab report` from files alone (no testbed, no host): a folder of vLLM result files named by the
documented convention is enough; every planned cell is listed with its state, and the exit code
tells a complete report (0) from an incomplete one (16) and from nothing merged (8).

The result files are the real vLLM 0.32.0 files (tests/fixtures) with the field report's numbers
(campaign_builder); the plan is the field report's shape, written here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from campaign_builder import REPORT, write_campaign

PROJECT = Path(__file__).resolve().parents[2]
FAB = str(Path(sys.executable).parent / "fab")
CAMPAIGN = "field-report"
PLAN = {
    "campaign": CAMPAIGN,
    "model": {"name": "Qwen/Qwen3-32B", "candidates": ["/mnt/Qwen3-32B"], "weights_gib": 61.0},
    "configurations": [
        {"name": "vanilla", "speculative_config": None},
        {"name": "ngram", "speculative_config": {"method": "ngram", "num_speculative_tokens": 6,
                                                 "prompt_lookup_min": 4, "prompt_lookup_max": 6}},
        {"name": "ngram_improved", "speculative_config": {"method": "ngram", "num_speculative_tokens": 4,
                                                          "prompt_lookup_min": 2, "prompt_lookup_max": 128}},
        {"name": "eagle3", "speculative_config": {"method": "eagle3", "model": "/mnt/draft",
                                                  "num_speculative_tokens": 3}},
    ],
    "baseline": "vanilla",
    "benchmark": {"dataset_path": "question.jsonl", "num_prompts": 16, "steady_state": "report-setup", "repeat": 1, "concurrencies": [1, 16],
                  "chat_template": "double"},
}
# the field report's split: w1 ran both n-gram configurations, w2 EAGLE-3
QUEUES = {"w1": ["vanilla", "ngram", "ngram_improved"], "w2": ["vanilla", "eagle3"]}


def fab_report(tmp_path: Path, *extra: str, plan: dict | None = None) -> subprocess.CompletedProcess:
    pf = tmp_path / "plan.yml"
    pf.write_text(yaml.safe_dump(plan or PLAN, sort_keys=False))
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("SPECFLEET_INVENTORY", None)
    return subprocess.run([FAB, "report", "--plan", str(pf), "--results", str(tmp_path / "results"), *extra],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300)


def out(r) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout[-5000:]}\n--- stderr\n{r.stderr[-3000:]}"


def flat(text: str) -> str:
    return " ".join(text.split())


def cells(camp: Path) -> dict[tuple[str, int, str], tuple[str, str]]:
    """(config, concurrency, node) -> (state, why) from report.md's Planned cells table."""
    md = (camp / "report.md").read_text()
    sec = md.split("## Planned cells", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for ln in sec.splitlines():
        parts = [p.strip() for p in ln.strip().strip("|").split(" | ")]
        if len(parts) == 6 and parts[1].isdigit():
            rows[(parts[0], int(parts[1]), parts[2])] = (parts[3], parts[5])
    return rows


def planned_json(camp: Path, queues: dict, notes: dict | None = None) -> None:
    """What `fab collect` records beside the host folders (specfleet.report.scan.cells.Planned.to_json)."""
    from specfleet.plan import parse_plan
    (camp / "planned.json").write_text(json.dumps({
        "plan_hash": parse_plan(PLAN).plan_hash(), "queues": queues,
        "sources": {h: "the split over the hosts collected" for h in queues}, "host_notes": notes or {}}))


def test_a_folder_of_plain_vllm_result_files_is_enough(tmp_path):
    camp = write_campaign(tmp_path / "results" / CAMPAIGN, done=False, logs=False)  # no markers, no state
    before = {p: p.read_bytes() for p in camp.rglob("*") if p.is_file()}
    r = fab_report(tmp_path)
    assert r.returncode == 0, out(r)
    got = cells(camp)
    assert len(got) == 10 and {s for s, _ in got.values()} == {"merged"}, got
    assert ("eagle3", 16, "w2") in got and ("ngram", 1, "w1") in got
    assert "Complete: all 10 planned" in flat(r.stdout), out(r)
    rows = json.loads((camp / "merged.json").read_text())
    w2 = {(x["config"], x["concurrency"]): x for x in rows if x["node"] == "w2"}
    assert w2[("eagle3", 16)]["speedup"] == pytest.approx(562.60 / 306.70)  # the report's 1.83x
    assert "Node equivalence: **PASSED" in (camp / "report.md").read_text()
    # nothing of the input was moved or changed; a second run writes the same report
    assert {p: p.read_bytes() for p in before} == before
    first = (camp / "report.md").read_text()
    again = fab_report(tmp_path)
    assert again.returncode == 0 and (camp / "report.md").read_text() == first, out(again)


def test_an_unreachable_hosts_cells_are_listed_missing_and_the_gate_not_checked(tmp_path):
    camp = write_campaign(tmp_path / "results" / CAMPAIGN,
                          data={k: v for k, v in REPORT.items() if k[0] == "w1"})
    planned_json(camp, QUEUES, {"w2": "w2 unreachable at collect: cannot connect to 10.0.0.2:22"})
    r = fab_report(tmp_path)
    assert r.returncode == 16, out(r)
    got = cells(camp)
    for cell in [("vanilla", 1, "w2"), ("vanilla", 16, "w2"), ("eagle3", 1, "w2"), ("eagle3", 16, "w2")]:
        state, why = got[cell]
        assert state == "MISSING" and "w2 unreachable at collect" in why, (cell, got[cell])
    assert sum(s == "merged" for s, _ in got.values()) == 6
    md = (camp / "report.md").read_text()
    assert "Node equivalence: **PASSED**" not in md and "Node equivalence PASSED" not in r.stdout
    assert "Node equivalence: **NOT CHECKED (" in md and "w2" in md.split("NOT CHECKED", 1)[1].split("\n")[0]
    assert md.startswith("> **⚠ INCOMPLETE: 4 of 10 planned cells are not merged")
    s = flat(r.stdout)
    assert "INCOMPLETE: 4 of 10 planned cells are not merged" in s, out(r)
    assert "fab bench --plan" in s and "--hosts w1,w2" in s and "fab collect --plan" in s, out(r)


def test_a_configuration_no_node_ran_is_a_missing_cell(tmp_path):
    write_campaign(tmp_path / "results" / CAMPAIGN, data={k: v for k, v in REPORT.items() if k[1] != "eagle3"})
    r = fab_report(tmp_path)
    assert r.returncode == 16, out(r)
    got = cells(tmp_path / "results" / CAMPAIGN)
    assert got[("eagle3", 1, "–")][0] == "MISSING" and "not run" in got[("eagle3", 1, "–")][1]


def test_requests_that_failed_make_a_run_not_count_and_the_cause_is_shown(tmp_path):
    camp = write_campaign(tmp_path / "results" / CAMPAIGN)
    f = camp / "w2" / "eagle3_conc16.json"
    d = json.loads(f.read_text())
    cause = ("Bad Request: This model's maximum context length is 2048 tokens. However, you requested "
             "2090 tokens (1578 in the messages, 512 in the completion).")
    d.update(completed=5, failed=11, errors=[""] * 5 + [cause] * 10 + ["Traceback (most recent call last):\n"
                                                                         "  ...\naiohttp.ServerDisconnectedError"])
    f.write_text(json.dumps(d))
    r = fab_report(tmp_path)
    assert r.returncode == 16, out(r)
    state, why = cells(camp)[("eagle3", 16, "w2")]
    assert state == "QUARANTINED", why
    assert "11 of 16 requests failed" in why and cause[:60] in why and "+1 other cause" in why, why
    assert f.exists()  # fab report moves nothing
    assert ("w2", "eagle3", 16) not in {(x["node"], x["config"], x["concurrency"])
                                        for x in json.loads((camp / "merged.json").read_text())}
    # the plan's tolerance: 11 failures allowed, the run counts
    tolerant = json.loads(json.dumps(PLAN))
    tolerant["benchmark"]["max_failed_requests"] = 11
    ok = fab_report(tmp_path, plan=tolerant)
    assert ok.returncode == 0, out(ok)


def test_fewer_completed_than_asked_does_not_count_even_without_a_failed_key(tmp_path):
    camp = write_campaign(tmp_path / "results" / CAMPAIGN)
    f = camp / "w1" / "ngram_conc1.json"
    d = json.loads(f.read_text())
    d.pop("failed", None)
    d.update(completed=12, num_prompts=-1)  # older vLLM: no `failed`; num_prompts as given on the CLI
    f.write_text(json.dumps(d))
    r = fab_report(tmp_path)
    assert r.returncode == 16, out(r)
    state, why = cells(camp)[("ngram", 1, "w1")]
    assert state == "QUARANTINED" and "4 of 16 requests failed or were not sent" in why, why


def test_bad_results_folder_is_one_line_exit_1(tmp_path):
    r = fab_report(tmp_path)
    assert r.returncode == 1, out(r)
    assert f"results/{CAMPAIGN}: no such folder" in r.stderr and "Traceback" not in r.stderr, out(r)


def test_the_queues_fab_bench_placed_are_what_collect_and_report_plan_with(tmp_path):
    """planned.json written at placement (tasks/bench.py) is read back instead of a second split."""
    from specfleet.plan import parse_plan
    from specfleet.report.scan.cells import PLACED, SPLIT, placed, placed_queues, planned_from
    plan = parse_plan(PLAN)
    camp = tmp_path / "results" / CAMPAIGN
    camp.mkdir(parents=True)
    assert placed_queues(plan, camp) is None                      # placed without one: collect splits, says so
    (camp / "planned.json").write_text(placed(plan, QUEUES))
    assert placed_queues(plan, camp) == QUEUES
    p = planned_from(plan, "plan.yml", camp, placed_queues(plan, camp), queues_source=PLACED)
    assert p.queues == QUEUES and set(p.sources.values()) == {PLACED}
    # collect writes it back with its notes (a run.json's queue wins there): the placement is kept
    p.sources["w1"] = "run.json"
    (camp / "planned.json").write_text(p.to_json())
    assert placed_queues(plan, camp) == QUEUES
    # another plan's placement, or collect's own split, is not taken for this plan's
    other = parse_plan({**PLAN, "benchmark": {**PLAN["benchmark"], "num_prompts": 32}})
    assert placed_queues(other, camp) is None
    planned_json(camp, QUEUES)
    assert json.loads((camp / "planned.json").read_text())["sources"]["w1"] == SPLIT and placed_queues(plan, camp) is None


def test_a_host_left_out_of_the_bench_is_named_in_the_report(tmp_path):
    """fab bench --hosts w1,w2,w3 with w3 unreachable places w1 and w2 only: w3 has no cell to be
    missing, and the report no longer named it. planned.json records it at placement, collect's
    rewrite keeps it, and collect's report and a later fab report name it with why."""
    from specfleet.plan import parse_plan
    from specfleet.report.build import report_plan
    from specfleet.report.scan.cells import PLACED, placed_queues, write_placed
    plan = parse_plan(PLAN)
    camp = write_campaign(tmp_path / "results" / CAMPAIGN)
    why = "unreachable: cannot connect to 10.10.30.13:22: timed out"
    write_placed(plan, QUEUES, camp, {"w3": why})
    said = f"w3 was left out of fab bench at placement ({why})"
    got = report_plan(plan, "plan.yml", tmp_path / "results", split_queues=placed_queues(plan, camp),
                      queues_source=PLACED, quiet=True)  # as collect calls it
    assert got.merged and said in (camp / "report.md").read_text()
    assert json.loads((camp / "planned.json").read_text())["left_out"] == {"w3": why}
    r = fab_report(tmp_path)
    assert said in flat(r.stdout) and said in (camp / "report.md").read_text(), out(r)


def test_why_no_placed_queues_is_said_as_it_is(tmp_path):
    """collect's warning when it falls back on the split: an unreadable planned.json was reported as one
    that "holds no queues"; each cause is said as it is, naming the file."""
    from specfleet.plan import parse_plan
    from specfleet.report.scan.cells import placed, placed_missing
    plan = parse_plan(PLAN)
    camp = tmp_path / "results" / CAMPAIGN
    camp.mkdir(parents=True)
    f = camp / "planned.json"
    assert placed_missing(plan, camp) == f"{f} does not exist (fab bench writes it when it places the queues)"
    f.mkdir()
    assert placed_missing(plan, camp) == f"{f} cannot be read (Is a directory)"
    f.rmdir()
    f.write_bytes(b"\xff\xfe{")
    assert placed_missing(plan, camp).startswith(f"{f} is not readable JSON (")
    f.write_text("[" * 100_000 + "]" * 100_000)
    assert placed_missing(plan, camp).startswith(f"{f} is not readable JSON (JSON nested 100000 levels deep")
    other = parse_plan({**PLAN, "benchmark": {**PLAN["benchmark"], "num_prompts": 32}})
    f.write_text(placed(other, QUEUES))
    assert placed_missing(plan, camp).startswith(f"{f} was placed for another version of the plan (plan hash ")
    f.write_text(json.dumps({"plan_hash": plan.plan_hash()}))
    assert placed_missing(plan, camp) == f"{f} holds no queues placed by fab bench for this plan"


@pytest.mark.parametrize("fields", [{"queues": []}, {"queues": {"w2": 5}}, {"sources": ["w1"]},
                                    {"host_notes": [["w2"]]}, {"queues": {"w2": "vanilla"}}])
def test_a_planned_json_of_another_shape_is_one_warning_and_the_host_folders_plan(tmp_path, fields):
    """planned.json damaged (edited by hand: a field of another type) is not read: one warning names the
    file and the field, and the queues come from the host folders as without one (was a traceback, or a
    queue read letter by letter)."""
    from specfleet.plan import parse_plan
    from specfleet.report.build import report_plan
    camp = write_campaign(tmp_path / "results" / CAMPAIGN)
    plan = parse_plan(PLAN)
    (camp / "planned.json").write_text(json.dumps({"plan_hash": plan.plan_hash(), "queues": QUEUES,
                                                   "sources": {}, "host_notes": {}, **fields}))
    o = report_plan(plan, "plan.yml", tmp_path / "results", quiet=True)
    [warning] = [w for w in o.warnings if "planned.json" in w]
    key = next(iter(fields))
    assert str(camp / "planned.json") in warning and f"'{key}" in warning and "not read" in warning, warning
    assert o.exit_code == 0 and {(c.config, c.node) for c in o.cells} == {
        (cfg, h) for h, q in QUEUES.items() for cfg in q}


def test_results_of_another_version_of_the_plan_say_so_and_what_changed(tmp_path):
    """Every result records the plan hash it was measured with. A plan edited since (here the output
    length) would otherwise label them with what they did not measure: the report names both hashes
    and the changed fields (from plan.json, the measured plan, which it keeps), writes no llm-d export,
    and tells how to measure again; a change of the report's rule alone leaves the results standing."""
    from specfleet.plan import parse_plan
    from specfleet.report.export.llmd import EXPORT_DIR
    measured = parse_plan(PLAN).plan_hash()
    camp = write_campaign(tmp_path / "results" / CAMPAIGN, extra={"plan_hash": measured})
    first = fab_report(tmp_path)
    assert first.returncode == 0 and "carry plan hash" not in first.stdout, out(first)
    assert json.loads((camp / "plan.json").read_text())["plan_hash"] == measured
    assert len(list((camp / EXPORT_DIR).glob("*.json"))) == 10

    longer = {**PLAN, "benchmark": {**PLAN["benchmark"], "output_len": 256}}
    r = fab_report(tmp_path, plan=longer)
    said = flat(r.stdout)
    now = parse_plan(longer).plan_hash()
    assert r.returncode == 0, out(r)
    assert f"the results carry plan hash {measured}; {tmp_path / 'plan.yml'} hashes {now} now" in said, out(r)
    assert "benchmark.output_len 512 -> 256" in said and "no llm-d export" in said, out(r)
    assert "benchmark.output_len 512 -> 256" in flat((camp / "report.md").read_text())
    assert json.loads((camp / "plan.json").read_text())["plan_hash"] == measured   # the measured plan stays
    assert list((camp / EXPORT_DIR).glob("*.json")) == []

    stricter = {**PLAN, "equivalence": {"tolerance_pct": 5}}
    r = fab_report(tmp_path, plan=stricter)
    assert r.returncode == 0 and "equivalence.tolerance_pct 3.0 -> 5.0" in flat(r.stdout), out(r)
    assert "Only how the report judges or places them changed: the results stand" in flat(r.stdout), out(r)
    docs = [json.loads(f.read_text()) for f in (camp / EXPORT_DIR).glob("*.json")]
    assert len(docs) == 10 and {d["scenario"]["stack"][1]["standardized"]["plan_hash"] for d in docs} == {measured}

    (camp / "plan.json").unlink()
    r = fab_report(tmp_path, plan=longer)
    assert "what changed is not known (plan.json does not hold the plan of that hash)" in flat(r.stdout), out(r)
    assert not (camp / "plan.json").exists()
    again = fab_report(tmp_path)
    assert again.returncode == 0 and "carry plan hash" not in again.stdout, out(again)
    assert json.loads((camp / "plan.json").read_text())["plan_hash"] == measured
