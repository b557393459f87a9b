"""`fab collect` end to end on the testbed: a short campaign (tests/e2e/plans/collect-fast.yml) run by
`fab bench` on two provisioned workers, then collected into a temporary results folder.

The expected numbers are read from the collected result JSON files themselves, never from
specfleet's output; what a worker holds is read on the worker (nsenter, no SSH).
"""
from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path

import pytest

from e2e_helpers import derived_inventory, events, fab, host_sh, inventory_of

pytestmark = pytest.mark.e2e

PLAN = "tests/e2e/plans/collect-fast.yml"  # fab runs in the project root
CAMPAIGN = "collect-fast"
WORK = "/var/lib/specfleet/campaigns"
HOSTS = ("w1", "w2")
MERGED = ("report.md", "report.html", "merged.csv", "merged.json")
# result-file key -> merged.json column
METRICS = {"output_throughput": "output_tok_s", "total_token_throughput": "total_tok_s",
           "mean_tpot_ms": "tpot_ms", "mean_ttft_ms": "ttft_ms", "mean_itl_ms": "itl_ms",
           "duration": "duration_s", "completed": "completed", "total_output_tokens": "output_tokens"}
SPEC = {"spec_decode_acceptance_rate": "acceptance_rate_pct",
        "spec_decode_acceptance_length": "acceptance_length", "spec_decode_num_drafts": "drafts"}
RESULT_RE = re.compile(r"^(?P<config>.+)_conc(?P<conc>\d+)\.json$")
SIM = "SIMULATED ENGINE"
NOT_EQ = "NODES NOT EQUIVALENT"


def out(r) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout[-6000:]}\n--- stderr\n{r.stderr[-3000:]}"


def run_dir(host: str) -> str:
    return f"{WORK}/{CAMPAIGN}/{host}"


def worker_state(tb, host: str) -> dict | None:
    r = host_sh(tb, host, f"cat {run_dir(host)}/state.json 2>/dev/null")
    try:
        return json.loads(r.stdout) if r.stdout.strip() else None
    except ValueError:
        return None  # read while the runner renames it: try again


def worker_files(tb, host: str) -> set[str]:
    return set(host_sh(tb, host, f"ls {run_dir(host)} 2>/dev/null").stdout.split())


def wait_for(pred, timeout: float, what: str):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def provisioned(testbed_factory, tmp_path: Path, speed: dict | None = None):
    tb = testbed_factory(workers=2, speed=speed or {})
    inv = inventory_of(tb)
    r = fab("provision", inventory=inv, runs=tmp_path / "runs-provision")
    assert r.returncode == 0, out(r)
    return tb, inv


def bench(inv: Path, tmp_path: Path, *extra: str):
    # the placed queues (planned.json) go where collect looks: tmp_path/results
    r = fab("bench", "--hosts", ",".join(HOSTS), "--plan", PLAN, "--results", str(tmp_path / "results"), *extra,
            inventory=inv, runs=tmp_path / "runs-bench")
    assert r.returncode == 0, out(r)
    return r


def collect(inv: Path, results: Path, runs: Path, *extra: str):
    return fab("collect", "--plan", PLAN, "--results", str(results), *extra, inventory=inv, runs=runs)


def wait_finished(tb, timeout: float = 300) -> None:
    def finished():
        states = [worker_state(tb, h) for h in HOSTS]
        return all(s and s.get("status") in ("done", "failed", "stopped") for s in states) and states
    for s in wait_for(finished, timeout, "both runners to finish"):
        assert s["status"] == "done", json.dumps(s, indent=1)[-3000:]


def result_files(camp: Path) -> dict[tuple[str, str, int], dict]:
    """(node, config, concurrency) -> the collected result JSON, for every host folder."""
    found = {}
    for hdir in sorted(p for p in camp.iterdir() if p.is_dir() and p.name != "quarantine"):
        for f in hdir.glob("*.json"):
            if m := RESULT_RE.match(f.name):
                found[(hdir.name, m["config"], int(m["conc"]))] = json.loads(f.read_text())
    return found


def check_merged_matches_files(camp: Path) -> list[dict]:
    """merged.json has one row per collected result file, with that file's numbers, and every
    speedup is the row's output tok/s over the same node's baseline at the same concurrency."""
    rows = json.loads((camp / "merged.json").read_text())
    files = result_files(camp)
    assert sorted((r["node"], r["config"], r["concurrency"]) for r in rows) == sorted(files)
    for r in rows:
        d = files[(r["node"], r["config"], r["concurrency"])]
        assert (d["node"], d["config"], d["max_concurrency"]) == (r["node"], r["config"], r["concurrency"])
        for key, col in METRICS.items():
            assert r[col] == pytest.approx(d[key], rel=1e-9), (r["node"], r["config"], r["concurrency"], key)
        base = files[(r["node"], "vanilla", r["concurrency"])]
        assert r["speedup"] == pytest.approx(d["output_throughput"] / base["output_throughput"], rel=1e-9)
        for key, col in SPEC.items():
            if key in d:
                assert r[col] == pytest.approx(d[key], rel=1e-9), (r["config"], key)
            else:
                assert r[col] is None, (r["config"], key)
        assert r["simulated"] is True and d["simulated"] is True
    return rows


def stamps_of(camp: Path) -> dict[str, str]:
    """The top of each output, where the stamps go."""
    md = (camp / "report.md").read_text()
    html = (camp / "report.html").read_text()
    body = html[html.index("<body>"):]
    with open(camp / "merged.csv", newline="") as fh:
        csv_stamps = {row["stamp"] for row in csv.DictReader(fh)}
    json_stamps = {r["stamp"] for r in json.loads((camp / "merged.json").read_text())}
    return {"md": md[:md.index("# Speculative-decoding campaign")],
            "html_title": re.search(r"<title>(.*?)</title>", html, re.S).group(1),
            "html_banner": body[:body.index("<h1>")],
            "csv": " / ".join(sorted(csv_stamps)) if len(csv_stamps) == 1 else f"differs per row: {csv_stamps}",
            "json": " / ".join(sorted(json_stamps)) if len(json_stamps) == 1 else f"differs per row: {json_stamps}"}


def recap(stdout: str) -> dict[str, dict[str, str]]:
    """host -> {ok, changed, failed, unreachable, skipped, result} from the RECAP table."""
    rows = {}
    for ln in stdout.split("RECAP collect", 1)[-1].splitlines():
        cells = [c.strip() for c in re.split(r"[│┃|]", ln)[1:-1]]
        if len(cells) == 7 and cells[0] in HOSTS:
            rows[cells[0]] = dict(zip(("ok", "changed", "failed", "unreachable", "skipped", "result"), cells[1:]))
    return rows


def flat(text: str) -> str:
    return " ".join(text.split())  # undo the terminal's line wrapping


def mtimes(camp: Path) -> dict[str, int]:
    return {str(p.relative_to(camp)): p.stat().st_mtime_ns for p in camp.rglob("*")
            if p.is_file() and p.parent != camp}  # host folders and quarantine, not the report


def test_collect_while_running_then_merge_quarantine_and_nothing_new(testbed_factory, tmp_path):
    tb, inv = provisioned(testbed_factory, tmp_path)
    results = tmp_path / "results"
    camp = results / CAMPAIGN
    bench(inv, tmp_path, "--no-wait")

    # 1. Collect while the campaign runs: on some worker the first item is done and the n-gram item
    #    is in its concurrency-1 run (~9 s; EAGLE-3's is twice as fast), so its finished
    #    ngram_conc8.json is already on the worker.
    def caught():
        for h in HOSTS:
            items = (worker_state(tb, h) or {}).get("items", [])
            cur = next((i for i in items if i["name"] == "ngram"), None)
            if items and items[0]["status"] == "done" and cur and cur["status"] == "benchmarking" \
                    and re.match(r"bench concurrency 1\b", cur.get("phase") or "") \
                    and "ngram_conc8.json" in worker_files(tb, h):
                return h, "ngram"
    host, running = wait_for(caught, 180, "a second item benchmarking at concurrency 1")
    # its server is held still (SIGSTOP to its process group) while collect runs: the run lasts
    # 5-10 s, and on a loaded machine collect took longer, so the item finished under it
    pgid = next(i for i in worker_state(tb, host)["items"] if i["name"] == running)["server_pid"]
    assert host_sh(tb, host, f"kill -STOP -- -{int(pgid)}").returncode == 0
    try:
        partial = collect(inv, results, tmp_path / "runs-partial")
        st = worker_state(tb, host)
    finally:
        assert host_sh(tb, host, f"kill -CONT -- -{int(pgid)}").returncode == 0
    assert next(i for i in st["items"] if i["name"] == running)["status"] != "done", \
        "the item finished during the collect: the plan's runs are too short for this test"
    assert partial.returncode in (16, 24), out(partial)  # the running items' cells are missing
    # the bench is running: collect says so and does not advise measuring again (issue 28)
    assert "the bench is still running on" in flat(partial.stdout) and f"{host} (runner pid" in flat(partial.stdout)
    assert "to measure them again" not in flat(partial.stdout), out(partial)
    got = {f.name for f in (camp / host).iterdir()}
    assert not {f"{running}_conc8.json", f"{running}.done", f"{running}.server.log"} & got, got
    assert {"vanilla_conc8.json", "vanilla_conc1.json", "vanilla.done", "state.json"} <= got, got
    for h in HOSTS:
        hdir = camp / h
        prov = json.loads((hdir / "provenance.json").read_text())
        done_here = {p.name[:-len(".done")] for p in hdir.glob("*.done")}
        assert done_here == set(prov["items_done"]), (h, done_here, prov)
        # the probe: the simulator's dist, hashes of the model files and the dataset, GPU count
        assert prov["dists"].get("specfleet-simvllm") and prov["model_simulated"] is True, prov
        assert len(prov["model_config_sha256"]) == 64 and len(prov["dataset_sha256"]) == 64, prov
        assert prov["gpu_count"] >= 1 and prov["plan_hash"], prov
        for f in hdir.glob("*.json"):
            if m := RESULT_RE.match(f.name):
                assert m["config"] in done_here, f"{h}: {f.name} of an unfinished item was collected"
        assert not list(hdir.glob("*.partial")) and not list(hdir.glob("*.bench.log"))
    if partial.returncode == 16:  # merged what was finished
        assert running not in {r["config"] for r in json.loads((camp / "merged.json").read_text())
                               if r["node"] == host}

    # 2. The campaign finishes. On w1 a finished result file is truncated (a half-written copy,
    #    e.g. a full disk) and a failed run's half-written .partial lies beside it.
    wait_finished(tb)
    w1_cfg = next(i["name"] for i in worker_state(tb, "w1")["items"] if i["name"] != "vanilla")
    bad = f"{w1_cfg}_conc1.json"
    assert host_sh(tb, "w1", f"cd {run_dir('w1')} && truncate -s 700 {bad} && "
                             f"head -c 300 vanilla_conc8.json > vanilla_conc8.json.partial").returncode == 0

    full = collect(inv, results, tmp_path / "runs-full")
    assert full.returncode == 16, out(full)  # merged, but incomplete: one planned cell is quarantined
    # quarantined, named on the terminal and in the report, never merged
    q = camp / "quarantine" / "w1" / bad
    assert q.is_file() and q.stat().st_size == 700 and not (camp / "w1" / bad).exists()
    assert "invalid JSON" in (q.parent / f"{bad}.reason.txt").read_text()
    assert re.search(rf"w1:{re.escape(bad)} on the worker is invalid \(invalid JSON.*quarantined as "
                     rf"\S*/quarantine/w1/{re.escape(bad)}; there is no earlier copy", flat(full.stdout)), out(full)
    assert re.search(rf"QUARANTINED: {w1_cfg} @ concurrency 1 on w1 \(0/1 runs\): {re.escape(bad)}: .*invalid JSON",
                     flat(full.stdout)), out(full)
    assert f"fab bench --plan {PLAN} --hosts w1,w2 && fab collect --plan {PLAN}" in flat(full.stdout), out(full)
    assert bad in (camp / "report.md").read_text() and bad in (camp / "report.html").read_text()
    assert "INCOMPLETE: 1 of 8 planned cells are not merged" in (camp / "report.md").read_text()
    assert not list((camp / "w1").glob("*.partial"))
    rows = check_merged_matches_files(camp)
    assert ("w1", w1_cfg, 1) not in {(r["node"], r["config"], r["concurrency"]) for r in rows}
    # the rest merged: every other (node, config, concurrency) the workers ran
    ran = {(h, i["name"], c) for h in HOSTS for i in worker_state(tb, h)["items"] for c in (1, 8)}
    assert {(r["node"], r["config"], r["concurrency"]) for r in rows} == ran - {("w1", w1_cfg, 1)}
    assert {r["config"] for r in rows} == {"vanilla", "ngram", "eagle3"}
    s = stamps_of(camp)
    assert (camp / "report.md").read_text().startswith(f"> **⚠ {SIM}"), s["md"]
    assert SIM in s["html_banner"] and "[SIMULATED]" in s["html_title"] and SIM in s["csv"] and SIM in s["json"], s
    assert NOT_EQ not in json.dumps(s), s
    assert "Node equivalence: **PASSED" in (camp / "report.md").read_text()
    md = (camp / "report.md").read_text()
    assert "simvllm 1.0 (simulated vLLM)" in md and "vLLM 0.32.0" not in md
    assert "## Provenance per result" in md and "--speculative-config" in md

    # 3. Collect again: nothing new on any host, no file touched, the quarantined file not fetched again.
    before = mtimes(camp)
    again = collect(inv, results, tmp_path / "runs-again")
    assert again.returncode == 16, out(again)
    steps = [e for e in events(tmp_path / "runs-again") if e.get("event") == "step"]
    assert {e["host"] for e in steps} == set(HOSTS), steps
    for e in steps:
        assert e["status"] == "ok" and not e["changed"] and "nothing new" in e["message"], e
    assert {h: (r["ok"], r["changed"], r["result"]) for h, r in recap(again.stdout).items()} == \
        {h: ("1", "0", "fine") for h in HOSTS}, out(again)
    assert mtimes(camp) == before
    # the refused result's record lies beside it (there, it is not fetched again either)
    assert sorted(p.name for p in (camp / "quarantine" / "w1").iterdir()) == \
        sorted([bad, f"{bad}.reason.txt", bad.removesuffix(".json") + ".record.json"])
    assert check_merged_matches_files(camp) == rows


def test_slower_node_is_refused_and_force_merges_stamped(testbed_factory, tmp_path):
    tb, inv = provisioned(testbed_factory, tmp_path, speed={"w2": 0.94})
    bench(inv, tmp_path)
    results = tmp_path / "results"
    camp = results / CAMPAIGN

    refused = collect(inv, results, tmp_path / "runs-refused")
    assert refused.returncode == 8, out(refused)
    assert not [n for n in MERGED if (camp / n).exists()]
    assert "Node equivalence (baseline on every node)" in refused.stdout and "INCONCLUSIVE" in refused.stdout, \
        out(refused)  # a single run per node (collect-fast): outside the band is INCONCLUSIVE, not shown
    assert re.search(r"w1 vs w2 @ conc 8: -\d+\.\d+ % outside the ±3 % band", flat(refused.stdout)), out(refused)
    # the printed diff is the files' own: w2's baseline output tok/s at concurrency 8 vs w1's
    files = result_files(camp)
    diff = (files[("w2", "vanilla", 8)]["output_throughput"] / files[("w1", "vanilla", 8)]["output_throughput"] - 1) * 100
    assert -9 < diff < -3, diff
    assert f"{diff:+.2f} %" in flat(refused.stdout), (diff, out(refused))

    # w1's inventory gives a bandwidth that contradicts its GPU's datasheet, w2's none: per host, saved
    forced = collect(derived_inventory(tb, tmp_path, lambda d: d["hosts"]["w1"].setdefault("vars", {}).update(
        gpu_memory_bandwidth_gbps=4800)), results, tmp_path / "runs-forced", "--force")
    assert forced.returncode == 0, out(forced)
    assert json.loads((camp / "w1" / "provenance.json").read_text())["inventory_gpu_memory_bandwidth_gbps"] == 4800
    # w2 keeps the testbed's fleet-wide figure (all.vars: 1792, the simulated GPU's datasheet)
    assert json.loads((camp / "w2" / "provenance.json").read_text())["inventory_gpu_memory_bandwidth_gbps"] == 1792
    assert "GPU memory bandwidth on w1: 4800 GB/s given (inventory gpu_memory_bandwidth_gbps)" in flat(forced.stdout)
    md = (camp / "report.md").read_text()
    bw = md.split("## Memory-bandwidth bound", 1)[1].split("\n## ", 1)[0]
    assert "w1 4800 GB/s (inventory gpu_memory_bandwidth_gbps); w2 1792 GB/s (inventory gpu_memory_bandwidth_gbps)" in bw, bw
    assert "GPU memory bandwidth on w2" not in flat(forced.stdout)
    # fab report afterwards reproduces collect's report: the per-host figures came back from the campaign folder
    rep = fab("report", "--plan", PLAN, "--results", str(results), "--force")
    assert rep.returncode == 0, out(rep)
    assert (camp / "report.md").read_text() == md
    s = stamps_of(camp)
    title = s.pop("html_title")
    assert "[SIMULATED]" in title and f"[{NOT_EQ}]" in title, title
    for where, text in s.items():
        assert NOT_EQ in text and SIM in text, (where, text)
    assert "> **⚠ NODES NOT EQUIVALENT" in s["md"]
    assert "Node equivalence: **INCONCLUSIVE: the data can show equivalence only within" in \
        (camp / "report.md").read_text()
    check_merged_matches_files(camp)

    # a refused collect afterwards removes the forced report, so it cannot pass for current
    again = collect(inv, results, tmp_path / "runs-again")
    assert again.returncode == 8, out(again)
    assert not [n for n in MERGED if (camp / n).exists()]


def test_a_result_corrupted_on_the_worker_never_replaces_the_good_copy_and_is_measured_again(testbed_factory,
                                                                                                 tmp_path):
    """Issue 10.5: collect once; corrupt a result on the worker; collect again: the good local copy
    stays and is merged, the worker's copy is quarantined and named; `fab bench` measures that item
    again (and only it), and the next collect takes the new file."""
    tb, inv = provisioned(testbed_factory, tmp_path)
    bench(inv, tmp_path)
    results = tmp_path / "results"
    camp = results / CAMPAIGN
    first = collect(inv, results, tmp_path / "runs-1")
    assert first.returncode == 0, out(first)
    assert "Complete: all 8 planned" in flat(first.stdout), out(first)
    cfg = next(i["name"] for i in worker_state(tb, "w1")["items"] if i["name"] != "vanilla")
    name = f"{cfg}_conc8.json"
    good = (camp / "w1" / name).read_bytes()
    assert host_sh(tb, "w1", f"cd {run_dir('w1')} && truncate -s 500 {name}").returncode == 0

    second = collect(inv, results, tmp_path / "runs-2")
    assert second.returncode == 0, out(second)  # the valid copy is merged: the report is complete
    assert (camp / "w1" / name).read_bytes() == good
    q = camp / "quarantine" / "w1" / name
    assert q.stat().st_size == 500 and "invalid JSON" in (q.parent / f"{name}.reason.txt").read_text()
    assert re.search(rf"w1:{re.escape(name)} on the worker is invalid \(invalid JSON.*the valid copy collected "
                     "earlier is kept and merged", flat(second.stdout)), out(second)
    assert name in (camp / "report.md").read_text()
    rows = check_merged_matches_files(camp)
    assert ("w1", cfg, 8) in {(r["node"], r["config"], r["concurrency"]) for r in rows}

    before = {i["name"]: i["attempts"] for i in worker_state(tb, "w1")["items"]}
    bench(inv, tmp_path)
    after = {i["name"]: i["attempts"] for i in worker_state(tb, "w1")["items"]}
    assert after == {**before, cfg: before[cfg] + 1}, (before, after)
    remeasured = json.loads(host_sh(tb, "w1", f"cat {run_dir('w1')}/{name}").stdout)

    third = collect(inv, results, tmp_path / "runs-3")
    assert third.returncode == 0, out(third)
    assert json.loads((camp / "w1" / name).read_text()) == remeasured and (camp / "w1" / name).read_bytes() != good
    check_merged_matches_files(camp)

    # Issue 10.6: the same campaign collected afresh while w2 cannot be reached: w2's cells are
    # listed missing with the reason, the gate says NOT CHECKED (never PASSED), exit 4 + 16.
    def edit(doc):
        doc["hosts"]["w2"].update(address="10.10.30.99", connect_timeout=1)
    fresh = tmp_path / "results-fresh"
    gone = collect(derived_inventory(tb, tmp_path, edit), fresh, tmp_path / "runs-4")
    assert gone.returncode == 4 | 16, out(gone)
    s = flat(gone.stdout)
    w2_items = [i["name"] for i in worker_state(tb, "w2")["items"]]
    for item in w2_items:
        for conc in (8, 1):
            assert f"MISSING: {item} @ concurrency {conc} on w2 (0/1 runs): {item}_conc{conc}.json: w2 unreachable " \
                   "at collect" in s, out(gone)
    assert f"INCOMPLETE: {2 * len(w2_items)} of 8 planned cells are not merged" in s, out(gone)
    assert "Node equivalence NOT CHECKED (" in s and "Node equivalence PASSED" not in s, out(gone)
    md = (fresh / CAMPAIGN / "report.md").read_text()
    assert "Node equivalence: **NOT CHECKED (" in md and md.startswith("> **⚠ SIMULATED")


REPEATS_PLAN = "tests/e2e/plans/collect-repeats.yml"


def test_gate_runs_add_baseline_runs_on_their_own_server_starts_and_measure_nothing_again(testbed_factory,
                                                                                          tmp_path):
    """Issue 23: three repeats, each its own server start with vanilla and ngram interleaved; then
    `fab bench --gate-runs 5` (what an INCONCLUSIVE gate asks for) measures only vanilla's runs 4 and 5
    at the gate's concurrency, and the next collect's gate and tables use all five."""
    tb, inv = provisioned(testbed_factory, tmp_path, speed={"w2": 0.97})
    camp_dir = f"{WORK}/collect-repeats"
    r = fab("bench", "--hosts", ",".join(HOSTS), "--plan", REPEATS_PLAN, inventory=inv, runs=tmp_path / "runs-b1")
    assert r.returncode == 0, out(r)
    queues = {}
    for h in HOSTS:
        st = json.loads(host_sh(tb, h, f"cat {camp_dir}/{h}/state.json").stdout)
        queues[h] = list(dict.fromkeys(i["name"].split(".")[0] for i in st["items"]))
        assert queues[h][0] == "vanilla"   # the baseline on every node, ngram on one (the split)
        assert [i["name"] for i in st["items"]] == [c if r == 1 else f"{c}.r{r}" for r in (1, 2, 3) for c in queues[h]]
        starts = [i["started_at"] for i in st["items"]]
        assert starts == sorted(starts) and all(i["status"] == "done" for i in st["items"])
        log = host_sh(tb, h, f"cat {camp_dir}/{h}/vanilla.server.log").stdout
        assert log.count("==== specfleet ") == 3   # a server start per repeat
    results = tmp_path / "results"
    first = fab("collect", "--plan", REPEATS_PLAN, "--results", str(results), "--force", inventory=inv,
                runs=tmp_path / "runs-c1")
    assert first.returncode == 0, out(first)
    camp = results / "collect-repeats"
    report = (camp / "report.md").read_text()
    assert "Repeats: server-start, each repeat on its own server start" in report
    # every result came with its run record, and the report read the run from it (issue 40)
    from specfleet.report.scan.folder import scan_folder
    runs = scan_folder(camp, quarantine=False).runs
    assert runs and all(r.path.with_name(r.path.name.removesuffix(".json") + ".record.json").is_file() for r in runs)
    assert all(r.record.run_id and r.record.serve_argv and r.record.engine["simulated"] is True for r in runs)
    for h in HOSTS:
        vanilla = [r.record for r in runs if r.host == h and r.config == "vanilla"]
        assert sorted(v.repeat for v in vanilla) == [1, 2, 3] and {v.isolation for v in vanilla} == {"server-start"}
        assert len({v.server_start for v in vanilla}) == 3   # a server start per repeat, as the record says
    stamp = {h: host_sh(tb, h, f"stat -c '%n %Y' {camp_dir}/{h}/*_r[123].json").stdout for h in HOSTS}

    more = fab("bench", "--hosts", ",".join(HOSTS), "--plan", REPEATS_PLAN, "--gate-runs", "5", inventory=inv,
               runs=tmp_path / "runs-b2")
    assert more.returncode == 0, out(more)
    assert "gate runs: vanilla at concurrency 8, runs 4-5, each on its own server start" in flat(more.stdout)
    for h in HOSTS:
        st = json.loads(host_sh(tb, h, f"cat {camp_dir}/{h}/state.json").stdout)
        phases = {i["name"]: i["phase"] for i in st["items"]}
        assert [n for n, p in phases.items() if p != "done earlier"] == ["vanilla.r4", "vanilla.r5"], phases
        assert host_sh(tb, h, f"stat -c '%n %Y' {camp_dir}/{h}/*_r[123].json").stdout == stamp[h]
        files = set(host_sh(tb, h, f"ls {camp_dir}/{h}").stdout.split())
        assert {"vanilla_conc8_r4.json", "vanilla_conc8_r5.json"} <= files and "ngram_conc8_r4.json" not in files
        assert host_sh(tb, h, f"cat {camp_dir}/{h}/vanilla.server.log").stdout.count("==== specfleet ") == 5
    second = fab("collect", "--plan", REPEATS_PLAN, "--results", str(results), "--force", inventory=inv,
                 runs=tmp_path / "runs-c2")
    assert second.returncode == 0, out(second)
    assert "MIXED PLANS" not in second.stdout, out(second)   # the plan hash did not change
    rows = json.loads((camp / "merged.json").read_text())
    assert sorted((r["node"], r["config"], r["repeats"]) for r in rows) == \
        sorted((h, c, 5 if c == "vanilla" else 3) for h in HOSTS for c in queues[h])
    assert sorted(queues.values()) == [["vanilla"], ["vanilla", "ngram"]]
    gate_rows = (camp / "report.md").read_text().split("Node equivalence (baseline on every node)")[1]
    assert "w1 vs w2" in gate_rows


DECIDES_PLAN = "tests/e2e/plans/collect-gate-decides.yml"
#: sim.json noise (relative sd of each server start's speed level) and noise_seed per worker: the
#: draws are independent per start (simenv.start_noise_seed); the seeds make the test replayable.
#: gate.decide on these seeds' levels alone: INCONCLUSIVE at 3 runs, PASSED at 5, 8 and 12; at
#: noise 1 % any seed pair is INCONCLUSIVE at 3 runs 81 % of the time, and then PASSED at 8 in 99 %.
NOISE = {"w1": (0.01, 1), "w2": (0.01, 101)}


def test_more_gate_runs_turn_an_inconclusive_gate_into_a_decision(testbed_factory, tmp_path):
    """Issue 23: identical nodes with honest run-to-run noise (a speed level drawn per server start):
    3 runs per node leave the gate INCONCLUSIVE; the gate-runs count the report names measures only
    new baseline runs, each on a fresh server start, and the gate then decides: PASSED."""
    tb, inv = provisioned(testbed_factory, tmp_path)
    for h, (noise, seed) in NOISE.items():
        host_sh(tb, h, "cat > /var/lib/specfleet-testbed/sim.json <<'E'\n"
                f'{{"speed_factor": 1.0, "noise": {noise}, "noise_seed": {seed}, "fault": null}}\nE\n')
    camp_dir = f"{WORK}/collect-gate-decides"
    results = tmp_path / "results"
    r = fab("bench", "--hosts", ",".join(HOSTS), "--plan", DECIDES_PLAN, inventory=inv, runs=tmp_path / "runs-b0")
    assert r.returncode == 0, out(r)
    verdicts, looks = [], 0
    while True:
        c = fab("collect", "--plan", DECIDES_PLAN, "--results", str(results), inventory=inv,
                runs=tmp_path / f"runs-c{looks}")
        verdict = re.search(r"node equivalence (PASSED|FAILED|INCONCLUSIVE)", flat(c.stdout), re.I)
        assert verdict, out(c)
        verdicts.append(verdict[1])
        if verdict[1] != "INCONCLUSIVE":
            break
        assert c.returncode != 0, out(c)     # nothing merged while undecided
        nxt = re.search(r"fab bench --gate-runs (\d+)", flat(c.stdout))
        assert nxt, out(c)                   # the next look is named
        n = int(nxt[1])
        stamp = {h: set(host_sh(tb, h, f"stat -c '%n %Y' {camp_dir}/{h}/vanilla_conc8_r*[0-9].json").stdout.splitlines())
                 for h in HOSTS}
        looks += 1
        more = fab("bench", "--hosts", ",".join(HOSTS), "--plan", DECIDES_PLAN, "--gate-runs", str(n),
                   inventory=inv, runs=tmp_path / f"runs-b{looks}")
        assert more.returncode == 0, out(more)
        for h in HOSTS:   # only the new runs were measured, each on its own start; nothing measured again
            st = json.loads(host_sh(tb, h, f"cat {camp_dir}/{h}/state.json").stdout)
            fresh = [i["name"] for i in st["items"] if i["phase"] != "done earlier"]
            had = len(stamp[h])
            assert fresh == [f"vanilla.r{k}" for k in range(had + 1, n + 1)], st["items"]
            now = set(host_sh(tb, h, f"stat -c '%n %Y' {camp_dir}/{h}/vanilla_conc8_r*[0-9].json").stdout.splitlines())
            assert stamp[h] < now and len(now) == n, (stamp[h], now)
            assert host_sh(tb, h, f"cat {camp_dir}/{h}/vanilla.server.log").stdout.count("==== specfleet ") == n
    assert verdicts[0] == "INCONCLUSIVE" and verdicts[-1] == "PASSED", verdicts
    assert c.returncode == 0, out(c)
    report = (results / "collect-gate-decides" / "report.md").read_text()
    assert "Node equivalence: **PASSED** (" in report and len(verdicts) >= 2
    logs = {h: host_sh(tb, h, f"cat {camp_dir}/{h}/vanilla.server.log").stdout for h in HOSTS}
    levels = {h: re.findall(r"steps take x([0-9.]+)", logs[h]) for h in HOSTS}
    assert all(len(set(v)) == len(v) > 3 for v in levels.values()), levels   # a draw per start


def test_two_collects_at_once_both_succeed(testbed_factory, tmp_path):
    """The SRE's round: two `fab collect` of one campaign at once, one crashed in 2 of 3 rounds (a temp
    file name shared by both writers of report.md, and one .staging/<host> emptied under the other).
    Three rounds, each into a fresh results folder: both exit 0 and the report is whole."""
    import shutil
    import threading
    tb, inv = provisioned(testbed_factory, tmp_path)
    bench(inv, tmp_path)
    placed = tmp_path / "results" / CAMPAIGN / "planned.json"
    for rnd in range(3):
        results = tmp_path / f"results-{rnd}"
        (results / CAMPAIGN).mkdir(parents=True)
        shutil.copy(placed, results / CAMPAIGN / "planned.json")
        got = {}
        both = [threading.Thread(target=lambda k=k: got.__setitem__(
            k, collect(inv, results, tmp_path / f"runs-{rnd}-{k}"))) for k in range(2)]
        for t in both:
            t.start()
        for t in both:
            t.join()
        for r in got.values():
            assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, out(r)
        camp = results / CAMPAIGN
        assert not (camp / ".staging").exists() and not list(camp.glob(".*.tmp"))
        check_merged_matches_files(camp)


def test_a_worker_unreachable_at_placement_is_named_in_the_report(testbed_factory, tmp_path):
    """`fab bench --hosts w1,w2` with w2 unreachable places every cell on w1: w2 had no cell to be
    missing and the report no longer named it. planned.json records it at placement and collect's
    report names it with why."""
    tb, _ = provisioned(testbed_factory, tmp_path)
    gone = derived_inventory(tb, tmp_path, lambda d: d["hosts"]["w2"].update(address="10.10.30.99",
                                                                              connect_timeout=1))
    r = fab("bench", "--hosts", "w1,w2", "--plan", PLAN, "--results", str(tmp_path / "results"),
            inventory=gone, runs=tmp_path / "runs-bench")
    assert r.returncode == 4 and "Traceback" not in r.stdout + r.stderr, out(r)  # 4: a host unreachable
    placed = json.loads((tmp_path / "results" / CAMPAIGN / "planned.json").read_text())
    assert list(placed["placed"]) == ["w1"] and placed["left_out"]["w2"].startswith("unreachable: "), placed
    c = collect(gone, tmp_path / "results", tmp_path / "runs-collect")
    said = "w2 was left out of fab bench at placement (unreachable: "
    assert said in flat(c.stdout), out(c)
    assert said in (tmp_path / "results" / CAMPAIGN / "report.md").read_text()
