"""The crossover search end to end: plans/followup-crossover.yml made short, `fab bench` on the
2-worker testbed (simulated vLLM), `fab collect`, then `fab bench` again, which measures nothing new.

Assertions read the workers' own files (nsenter, no SSH) and the collected report; no number of
the simulated engine is hard-coded: where the speedup crosses comes from the measured files.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from e2e_helpers import PROJECT, fab, host_sh, inventory_of
from specfleet.plan.crossover_grid import coarse_grid, fine_grid

pytestmark = pytest.mark.e2e

PLAN = PROJECT / "plans/followup-crossover.yml"
SAMPLE = PROJECT / "datasets/sample/question.jsonl"  # 41 prompts
WORK = "/var/lib/specfleet/campaigns"
CAMPAIGN = "e2e-crossover"
SEARCH = {"search": "crossover", "min": 1, "max": 64, "coarse_factor": 4, "per_doubling": 1, "budget": 6}


def short_plan(tmp_path: Path) -> Path:
    """The follow-up plan on the testbed: its models and the sample dataset, 64 output tokens, prompts
    raised to 0.5 x concurrency (32 at c=64, the sample has 41), 2 runs per cell, and EAGLE-3 with
    8 draft tokens added beside the plan's configurations (the simulated engine's model puts its
    crossover near c=64 at 64 output tokens: it pays at 16 and not at 64, so the search refines)."""
    doc = yaml.safe_load(PLAN.read_text())
    doc["campaign"], doc["vllm_version"] = CAMPAIGN, None
    doc["model"]["candidates"] = ["/mnt/Qwen3-32B", "/mnt/fabrix/models/Qwen3-32B"]
    doc["server"]["args"] = ["--max-model-len", "2048", "--no-enable-log-requests"]
    doc["server"]["health_poll_s"] = 0.5
    for c in doc["configurations"]:
        if c["name"] == "eagle3":
            c["speculative_config"]["model"] = "/mnt/fabrix/models/Qwen3-32B-speculator.eagle3"
    doc["configurations"].append({"name": "eagle3_k8", "speculative_config": {
        "method": "eagle3", "model": "/mnt/fabrix/models/Qwen3-32B-speculator.eagle3", "num_speculative_tokens": 8}})
    b = doc["benchmark"]
    b.update(dataset_path=str(SAMPLE), num_prompts=4, min_prompts_per_concurrency=0.5, output_len=64,
             concurrencies=SEARCH, repeat=2, timeout_s=300)
    doc["stop_timeout_s"] = 30
    out = tmp_path / "followup-crossover.yml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def run_dir(host: str) -> str:
    return f"{WORK}/{CAMPAIGN}/{host}"


def host_json(tb, host: str, path: str):
    p = host_sh(tb, host, f"cat {shlex.quote(path)} 2>/dev/null")
    return json.loads(p.stdout) if p.stdout.strip() else None


def result_files(tb, host: str) -> dict[str, str]:
    """name -> mtime of every result file of the campaign on `host`."""
    out = host_sh(tb, host, f"cd {run_dir(host)} && stat -c '%n %.9Y' *_conc*.json").stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def test_crossover_plan_refines_on_each_node_reports_and_a_second_run_measures_nothing(testbed_factory, tmp_path):
    tb = testbed_factory(workers=2)
    inv = inventory_of(tb)
    out = fab("provision", inventory=inv, runs=tmp_path / "runs-provision")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    plan = short_plan(tmp_path)
    bench = lambda tag: fab("bench", "--hosts", "w1,w2", "--plan", str(plan), "--poll", "0.5",  # noqa: E731
                            inventory=inv, runs=tmp_path / f"runs-{tag}", timeout=900)
    out = bench("first")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    grid, coarse = fine_grid(1, 64, 1), coarse_grid(1, 64, 4)
    refined_somewhere = False
    for host in ("w1", "w2"):
        spec = host_json(tb, host, f"{run_dir(host)}/run.json")
        queue = [i["name"] for i in spec["items"] if "config" not in i]   # the first repeat's items
        assert queue[0] == "vanilla" and spec["crossover"]["configs"] == queue[1:]
        # each repeat a server start of its own (repeat_isolation: server-start), configurations interleaved
        assert [i["name"] for i in spec["items"]] == queue + [f"{c}.r2" for c in queue]
        st = host_json(tb, host, f"{run_dir(host)}/state.json")
        assert st["status"] == "done", st
        assert all(i["status"] == "done" for i in st["items"]), st["items"]
        files = result_files(tb, host)
        for cfg, d in st["crossover"]["configs"].items():
            assert d["why"].startswith(("done", "budget spent")), d
            measured = sorted(int(c) for c in d["points"])
            assert set(coarse) <= set(measured) and len(measured) <= SEARCH["budget"]
            for c in measured:  # every point of the configuration and the same node's baseline, both runs
                assert {f"{cfg}_conc{c}_r1.json", f"{cfg}_conc{c}_r2.json",
                        f"vanilla_conc{c}_r1.json", f"vanilla_conc{c}_r2.json"} <= set(files), (host, cfg, c)
            refined_somewhere |= len(measured) > len(coarse)
            # done: every verdict change of the configuration lies between neighbouring grid points
            if d["why"].startswith("done"):
                v = [d["points"][str(c)]["verdict"] for c in measured]
                for (a, va), (b, vb) in zip(zip(measured, v), zip(measured[1:], v[1:])):
                    assert va == vb or grid.index(b) - grid.index(a) == 1, (host, cfg, d["points"])
        # a refined cell's run sent prompts for a steady state: max(4, 0.5 x c)
        r = host_json(tb, host, f"{run_dir(host)}/vanilla_conc64_r1.json")
        assert r["num_prompts"] == 32 and r["completed"] == 32 and r["simulated"] is True
        assert not host_sh(tb, host, f"ls {run_dir(host)}/*.partial 2>/dev/null").stdout.strip()
    assert refined_somewhere, "no configuration needed a refinement round: the plan does not exercise the search"

    results = tmp_path / "results"
    # --force: with 2 runs per cell on a machine shared by many, the baselines' 90 % interval is often
    # wider than the gate's 3 % band (the gate is tested in test_collect.py); the report is stamped
    out = fab("collect", "--plan", str(plan), "--hosts", "w1,w2", "--results", str(results), "--force",
              inventory=inv, runs=tmp_path / "runs-collect", timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    md = (results / CAMPAIGN / "report.md").read_text()
    html = (results / CAMPAIGN / "report.html").read_text()
    for cfg in ("eagle3_k8", "ngram_improved", "eagle3"):
        assert f"Crossover of **{cfg}** on " in md, md[:3000]
    assert 'aria-label="Crossover"' in html and "SIMULATED" in md

    before = {h: result_files(tb, h) for h in ("w1", "w2")}
    out = bench("second")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    for host in ("w1", "w2"):
        assert result_files(tb, host) == before[host], f"{host}: the second run measured again"
        st = host_json(tb, host, f"{run_dir(host)}/state.json")
        assert [i["name"] for i in st["items"]] == [i["name"] for i in host_json(
            tb, host, f"{run_dir(host)}/run.json")["items"]]  # no refinement round: nothing left to measure
        assert all(d["next"] == [] for d in st["crossover"]["configs"].values())


# ---------------------------------------------------------------- metric: goodput
GOODPUT_SEARCH = {"search": "crossover", "min": 2, "max": 32, "coarse_factor": 4, "per_doubling": 2, "budget": 6,
                  "metric": "goodput"}


def goodput_plan(tmp_path: Path) -> tuple[Path, float]:
    """The short plan with vanilla and EAGLE-3 only, one run per cell, one wave of c prompts per cell,
    and a TTFT SLO set from the simulated engine's model functions (testbed/simvllm/vllm/model.py, not
    a number of it) between its estimates at concurrency 8 and 32."""
    import sys
    sys.path.insert(0, str(PROJECT / "testbed" / "simvllm"))
    try:
        from vllm import model as sim
    finally:
        sys.path.remove(str(PROJECT / "testbed" / "simvllm"))
    van = sim.method("vanilla")
    ttft = lambda c: sim.prefill_ms(c * sim.MIX_PROMPT_TOKENS) + sim.tpot_ms(van, c, output_len=64, prefill=False)  # noqa: E731
    slo = round((ttft(8) * ttft(32)) ** 0.5, 1)
    doc = yaml.safe_load(short_plan(tmp_path).read_text())
    doc["campaign"] = CAMPAIGN + "-goodput"
    doc["configurations"] = [c for c in doc["configurations"] if c["name"] in ("vanilla", "eagle3")]
    doc["benchmark"].update(concurrencies=GOODPUT_SEARCH, repeat=1, min_prompts_per_concurrency=1,
                            slo={"ttft_ms": slo, "attainment_pct": 90})
    doc["equivalence"]["concurrency"] = 8   # one of the coarse grid (2, 8, 32)
    out = tmp_path / "goodput-crossover.yml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out, slo


def test_goodput_search_finds_the_highest_concurrency_meeting_the_slo(testbed_factory, tmp_path):
    from specfleet.worker.crossover import MEETS, MISSES, good_requests
    from specfleet.worker.layout import result_filename
    tb = testbed_factory(workers=1)
    inv = inventory_of(tb)
    out = fab("provision", inventory=inv, runs=tmp_path / "runs-provision")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    plan, slo = goodput_plan(tmp_path)
    camp = CAMPAIGN + "-goodput"
    out = fab("bench", "--hosts", "w1", "--plan", str(plan), "--poll", "0.5", inventory=inv,
              runs=tmp_path / "runs-bench", timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    rdir = f"{WORK}/{camp}/w1"
    st = host_json(tb, "w1", f"{rdir}/state.json")
    assert st["status"] == "done" and set(st["crossover"]["configs"]) == {"vanilla", "eagle3"}, st
    grid = fine_grid(2, 32, 2)
    tops = {}
    for cfg, d in st["crossover"]["configs"].items():
        pts = {int(c): p for c, p in d["points"].items()}
        # every verdict is the one the collected file gives by vLLM's rule: >= 90 % of requests within the SLO
        for c, p in pts.items():
            r = host_json(tb, "w1", f"{rdir}/{result_filename(cfg, c)}")  # one run per cell: no _r suffix
            good, ok = good_requests(r["ttfts"], r["latencies"], r["output_lens"], r["errors"], {"ttft_ms": slo})
            assert p["verdict"] == (MEETS if good >= 0.9 * ok else MISSES) and p["attainment_pct"] == 100 * good / ok
        meets = [c for c, p in pts.items() if p["verdict"] == MEETS]
        tops[cfg] = max(meets, default=None)
        assert d["why"].startswith("done") and f"highest concurrency measured meeting the SLO: {tops[cfg]}" in d["why"], d
        # located within one grid step: the next fine-grid point above the highest meeting one was measured and misses
        if tops[cfg] is not None and tops[cfg] < 32:
            assert pts[grid[grid.index(tops[cfg]) + 1]]["verdict"] == MISSES, (cfg, pts)
    # (on this testbed the simulated engine's TTFTs met the SLO at every concurrency up to 32 in the runs
    # of 2026-12-02, so the boundary was not inside the range; locating it within one grid step is
    # tests/worker/test_crossover.py's goodput test, on synthetic files)
    assert tops["vanilla"] is not None, (slo, st["crossover"])

    results = tmp_path / "results"
    out = fab("collect", "--plan", str(plan), "--hosts", "w1", "--results", str(results), inventory=inv,
              runs=tmp_path / "runs-collect", timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    md = (results / camp / "report.md").read_text()
    # the report's own rule on the collected files agrees with the node's search
    assert f"vanilla on w1: highest concurrency meeting it: {tops['vanilla']}" in md, md[-4000:]
    assert f"highest concurrency measured meeting the SLO: {tops['eagle3']}" in md and "SIMULATED" in md
