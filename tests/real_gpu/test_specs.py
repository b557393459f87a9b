"""The runner specs made from plans/, and the provenance stamp the device adds to them."""
import json
from pathlib import Path

import pytest

from testbed.realgpu import specs

PLANS = Path(__file__).resolve().parents[2] / "testbed" / "realgpu" / "plans"
FACTS = {"gpu": "NVIDIA H200", "driver": "580.159.04", "torch_version": "2.11.0+cu130", "cuda_version": "13.0",
         "engine": specs.ENGINE}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("specs")
    return {p.stem: json.loads(p.read_text()) for p in specs.make(PLANS, out)}


def test_one_spec_per_plan_baseline_first(made):
    assert set(made) == {"h200-dummy8b", "h200-dummy32b", "h200-smollm2", "h200-eagle3"}
    assert [i["name"] for i in made["h200-smollm2"]["items"]] == ["vanilla", "ngram", "ngram_improved"]
    assert [i["name"] for i in made["h200-eagle3"]["items"]] == ["vanilla", "eagle3"]


def test_the_eagle3_item_serves_the_drafter_the_device_writes(made):
    """models.py eagle3 writes the drafter where the eagle3 item's --speculative-config points."""
    argv = made["h200-eagle3"]["items"][1]["serve_argv"]
    sc = json.loads(argv[argv.index("--speculative-config") + 1])
    assert sc == {"method": "eagle3", "model": "/tmp/sfgpu/models/qwen3-8b-eagle3-dummy", "num_speculative_tokens": 3}
    assert "dummy" in argv[argv.index("--load-format") + 1]   # the drafter inherits it: random weights
    for s in made.values():
        assert s["host"] == specs.NODE and s["work_dir"] == specs.WORK_DIR
        for it in s["items"]:
            assert it["serve_argv"][0] == f"{specs.VENV}/bin/vllm"
            for b in it["bench"]:
                assert b["argv"][b["argv"].index("--dataset-path") + 1] == specs.DATASET


def test_stamp_appends_metadata_and_is_idempotent(made):
    before = json.dumps(made["h200-dummy8b"], sort_keys=True)
    s1 = specs.stamp(made["h200-dummy8b"], FACTS)
    argv = s1["items"][1]["bench"][0]["argv"]
    meta = argv[argv.index("--metadata") + 1:]
    assert meta[:2] == ["node=h200", "config=ngram_improved"]
    assert meta[-5:] == ["gpu=NVIDIA H200", "driver=580.159.04", "torch_version=2.11.0+cu130", "cuda_version=13.0",
                         f"engine={specs.ENGINE}"]
    assert specs.stamp(s1, FACTS) == s1
    s2 = specs.stamp(s1, {**FACTS, "driver": "999"})
    meta2 = s2["items"][0]["bench"][0]["argv"]
    assert [m for m in meta2 if m.startswith("driver=")] == ["driver=999"]
    assert json.dumps(made["h200-dummy8b"], sort_keys=True) == before  # input untouched
    assert not any(m.startswith(tuple(f"{k}=" for k in specs.STAMP_KEYS)) for it in made["h200-dummy8b"]["items"]
                   for b in it["bench"] for m in b["argv"])


def test_stamp_refuses_missing_or_multiline_facts(made):
    with pytest.raises(ValueError, match="missing: driver"):
        specs.stamp(made["h200-dummy8b"], {**FACTS, "driver": ""})
    with pytest.raises(ValueError, match="not one line"):
        specs.stamp(made["h200-dummy8b"], {**FACTS, "gpu": "A\nB"})


def test_parse_nvidia_smi():
    assert specs.parse_nvidia_smi("NVIDIA H200, 580.159.04\n") == ("NVIDIA H200", "580.159.04")
    assert specs.parse_nvidia_smi("\nNVIDIA H200, 580.159.04\nNVIDIA H200, 580.159.04\n")[0] == "NVIDIA H200"
    with pytest.raises(ValueError, match="unexpected nvidia-smi output"):
        specs.parse_nvidia_smi("No devices were found")
