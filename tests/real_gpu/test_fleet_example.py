"""docs/examples/h200-fleet/: what the product path produced on the lent H200 (fleet.sh: `fab facts`,
`fab provision` twice, `fab bench`, `fab collect`, `fab report` over SSH on loopback). CI re-renders the
collected campaign with `fab report` (no GPU, no host) and checks it is the committed one, and reads
the event logs and the provenance the collect probe recorded on the device."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EX = REPO / "docs" / "examples" / "h200-fleet"
CAMPAIGN = "h200-dummy8b"
FAB = str(Path(sys.executable).parent / "fab")


def _end(task: str) -> list[dict]:
    ends = []
    for f in sorted((EX / "events").glob(f"*-{task}-*.jsonl")):
        ends.append(json.loads(f.read_text().splitlines()[-1]))
    return ends


def test_fab_report_re_renders_the_committed_campaign(tmp_path):
    shutil.copytree(EX / CAMPAIGN, tmp_path / CAMPAIGN)
    for f in ("report.md", "merged.csv", "merged.json"):
        (tmp_path / CAMPAIGN / f).unlink()
    p = subprocess.run([FAB, "report", "--plan", "plans/h200-dummy8b.yml", "--results", str(tmp_path),
                        "--gpu-bandwidth-gbps", "4800"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]   # complete: every planned cell merged
    for f in ("report.md", "merged.csv", "merged.json"):
        assert (tmp_path / CAMPAIGN / f).read_text() == (EX / CAMPAIGN / f).read_text(), f
    md = (EX / CAMPAIGN / "report.md").read_text()
    assert "NVIDIA H200" in md and "SIMULATED" not in md and "| 1 | vanilla | w1 | 4.89 | 3.06 | 0.63 |" in md
    assert "| 1 | ngram_improved | w1 | 3.12 | 3.06 | 0.98 | DEGENERATE ACCEPTANCE |" in md
    assert "Complete: all 6 planned" in md
    # vanilla with 5 repeats on each of its two server starts
    merged = json.loads((EX / CAMPAIGN / "merged.json").read_text())
    assert sorted((r["config"], r["concurrency"], r["repeats"]) for r in merged if r["config"].startswith("vanilla")) == [
        ("vanilla", 1, 5), ("vanilla", 16, 5), ("vanilla-b", 1, 5), ("vanilla-b", 16, 5)]


def test_the_device_run_ended_as_the_logs_say():
    assert [e["exit_code"] for e in _end("facts")] == [0]
    prov = _end("provision")
    assert [e["exit_code"] for e in prov] == [0, 0] and prov[1]["counts"]["w1"]["changed"] == 0  # idempotent
    assert all(e["counts"]["w1"]["skipped"] == 3 for e in prov)   # nfs, network, model: skip_roles
    # the first bench started the runner (--no-wait); the second reattached and followed it to the end
    assert [e["exit_code"] for e in _end("bench")] == [0, 0]
    assert [e["exit_code"] for e in _end("collect")] == [0]


def test_the_bench_log_names_the_h200_read_over_ssh():
    for f in sorted((EX / "events").glob("*-bench-*.jsonl")):
        read = [json.loads(ln) for ln in f.read_text().splitlines() if '"read GPUs and campaign state"' in ln]
        assert read and read[0]["data"]["gpu_names"] == ["0: NVIDIA H200 143771 MiB"], f
        assert read[0]["data"]["gpus_source"] == "nvidia-smi"


def test_telemetry_was_recorded_during_every_run():
    results = sorted((EX / CAMPAIGN / "w1").glob("*_conc*_r*.json"))
    assert len(results) == 30
    for f in results:
        lines = [json.loads(ln) for ln in f.with_suffix(".telemetry.jsonl").read_text().splitlines()]
        samples = [ln for ln in lines if ln.get("kind") == "sample"]
        assert samples and all(g["sm_mhz"] > 0 and g["power_w"] > 0 for s in samples for g in s["gpus"]), f
        assert any(s.get("server", {}).get("generation_tokens") for s in samples), f
    assert "## Telemetry per run" in (EX / CAMPAIGN / "report.md").read_text()


def test_provenance_was_read_on_the_worker_by_collect():
    prov = json.loads((EX / CAMPAIGN / "w1" / "provenance.json").read_text())
    assert prov["gpu_name"] == "NVIDIA H200" and prov["driver"] == "580.159.04" and prov["cuda"] == "13.0"
    assert prov["python"] == "3.12.3" and prov["venv_digest"].startswith("dists-sha256:")
    assert prov["dists"]["vllm"] == "0.26.0" and prov["dists"]["torch"] == "2.11.0"
    assert prov["model_config_sha256"] and prov["dataset_sha256"] and not prov["venv_simulated"]
    state = json.loads((EX / CAMPAIGN / "w1" / "state.json").read_text())
    done = [i["name"] for i in state["items"] if i["status"] == "done"]
    assert done == ["vanilla", "ngram_improved", "vanilla-b"]


def test_the_noise_table_in_the_docs_is_what_noise_py_prints_from_the_committed_files():
    from testbed.realgpu import noise
    samples = [json.loads(ln) for ln in (EX / "device" / "samples.jsonl").read_text().splitlines() if ln.strip()]
    table = noise.table(EX / CAMPAIGN / "w1", samples)
    assert table == (EX / "noise.txt").read_text().rstrip("\n")
    # vanilla across its two server starts, and the gate metric's spread far under output tok/s's at c=16
    assert "| vanilla vs vanilla-b | 16 | 5 + 5 | 1.0029 | 1.0009 | 3.34 % | 0.11 % |" in table
    doc = (REPO / "docs" / "engines-gpu.md").read_text()
    assert all(row in doc for row in table.splitlines() if row.startswith("| vanilla"))
