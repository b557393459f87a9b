"""orphan.py's spec and verdict (the kill itself runs on the device)."""
import json
from pathlib import Path

from tests.run_argv import rendered
from testbed.realgpu import orphan, specs

PLANS = Path(__file__).resolve().parents[2] / "testbed" / "realgpu" / "plans"


def test_derived_spec(tmp_path):
    base = json.loads(next(p for p in specs.make(PLANS, tmp_path) if p.stem == "h200-dummy8b").read_text())
    s = orphan.derive_spec(base)
    assert s["campaign"] == orphan.CAMPAIGN and s["run_id"] == "h200-orphan-h200"
    assert [i["name"] for i in s["items"]] == ["vanilla"]
    item = s["items"][0]
    serve, benches = rendered(s, item)
    assert serve[-1] == "--enforce-eager"
    assert len(item["bench"]) == 1 and item["bench"][0]["concurrency"] == 16
    argv = benches[0]
    assert argv[argv.index("--num-prompts") + 1] == "128"
    assert argv[argv.index("--result-dir") + 1] == "/tmp/sfwork/h200-orphan/h200"
    assert "h200-dummy8b/" not in json.dumps(s)
    assert rendered(base, base["items"][0])[0][-1] != "--enforce-eager"   # the base spec is untouched


def test_verdict():
    good = {"killed_pid": 7, "item_status": "failed", "leftover_after": [], "gpu_used_after_mib": 1}
    assert orphan.verdict(good, 5000) == (True, [])
    ok, why = orphan.verdict({**good, "item_status": "done", "leftover_after": [{"pid": 9}],
                              "gpu_used_after_mib": 70000}, 5000)
    assert not ok and len(why) == 3 and "recorded as done" in why[0]
    assert orphan.verdict({**good, "killed_pid": None}, 5000)[1] == [
        "the API server was never killed (the item did not reach benchmarking)"]
