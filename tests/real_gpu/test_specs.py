"""The runner specs made from plans/, and the provenance stamp the device adds to them."""
import json
from pathlib import Path

import pytest

from tests.run_argv import rendered
from testbed.realgpu import specs

PLANS = Path(__file__).resolve().parents[2] / "testbed" / "realgpu" / "plans"
FACTS = {"gpu": "NVIDIA H200", "driver": "580.159.04", "torch_version": "2.11.0+cu130", "cuda_version": "13.0",
         "engine": specs.ENGINE}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("specs")
    return {p.stem: json.loads(p.read_text()) for p in specs.make(PLANS, out)}


def test_one_spec_per_plan_baseline_first(made):
    assert set(made) == {"h200-dummy8b", "h200-dummy32b", "h200-smollm2", "h200-eagle3",
                         "h200x2-dummy8b.h200-gpu0", "h200x2-dummy8b.h200-gpu1"}
    assert [i["name"] for i in made["h200-smollm2"]["items"]] == ["vanilla", "ngram", "ngram_improved"]
    assert [i["name"] for i in made["h200-eagle3"]["items"]] == ["vanilla", "eagle3"]


def serve_argv(spec: dict, item: dict) -> list[str]:
    return rendered(spec, item)[0]


def bench_argvs(spec: dict, item: dict) -> list[list[str]]:
    return rendered(spec, item)[1]


TWO = ("h200x2-dummy8b.h200-gpu0", "h200x2-dummy8b.h200-gpu1")


def test_two_gpu_specs_split_the_configurations_with_vanilla_on_both(made):
    a, b = (made[k] for k in TWO)
    # configurations in queue order (a repeat on its own server start is an item `<config>.r<k>`)
    qa, qb = (list(dict.fromkeys(i.get("config", i["name"]) for i in s["items"])) for s in (a, b))
    assert qa[0] == qb[0] == "vanilla" and set(qa[1:]).isdisjoint(qb[1:])
    assert set(qa) | set(qb) == {"vanilla", "ngram", "ngram_improved", "eagle3"}
    assert a["plan_hash"] == b["plan_hash"]            # one plan: the merged report accepts both
    for i, s in enumerate((a, b)):
        assert (s["gpu_index"], s["port"], s["env_file"], s["work_dir"]) == (
            i, 8000 + i, specs.gpu_env_file(i), specs.gpu_work_dir(i))
        for it in s["items"]:  # the runner renders both from the spec's port
            assert serve_argv(s, it)[serve_argv(s, it).index("--port") + 1] == str(8000 + i)
            for argv in bench_argvs(s, it):
                assert f"http://127.0.0.1:{8000 + i}" in argv


def test_gpu_env_file_shows_one_gpu_and_keeps_multicast_off():
    env = specs.env_for_gpu("A=1\nCUDA_VISIBLE_DEVICES=0,1\nNCCL_NVLS_ENABLE=1\n", 1).splitlines()
    assert env[0] == "A=1" and env.count("CUDA_VISIBLE_DEVICES=1") == 1 and "CUDA_VISIBLE_DEVICES=0,1" not in env
    assert "NCCL_NVLS_ENABLE=0" in env and "NCCL_NVLS_ENABLE=1" not in env
    assert {"TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1"} <= set(env)
    assert specs.env_for_gpu("\n".join(env), 1).splitlines() == env   # idempotent


def test_the_eagle3_item_serves_the_drafter_the_device_writes(made):
    """models.py eagle3 writes the drafter where the eagle3 item's --speculative-config points."""
    argv = serve_argv(made["h200-eagle3"], made["h200-eagle3"]["items"][1])
    sc = json.loads(argv[argv.index("--speculative-config") + 1])
    assert sc == {"method": "eagle3", "model": "/tmp/sfgpu/models/qwen3-8b-eagle3-dummy", "num_speculative_tokens": 3}
    assert "dummy" in argv[argv.index("--load-format") + 1]   # the drafter inherits it: random weights
    for s in (v for k, v in made.items() if k not in TWO):
        assert s["host"] == specs.NODE and s["work_dir"] == specs.WORK_DIR
        for it in s["items"]:
            assert serve_argv(s, it)[0] == f"{specs.VENV}/bin/vllm"
            for argv in bench_argvs(s, it):
                assert argv[argv.index("--dataset-path") + 1] == specs.DATASET


def test_stamp_appends_metadata_and_is_idempotent(made):
    before = json.dumps(made["h200-dummy8b"], sort_keys=True)
    s1 = specs.stamp(made["h200-dummy8b"], FACTS)
    argv = bench_argvs(s1, s1["items"][1])[0]
    meta = argv[argv.index("--metadata") + 1:]
    assert meta[:2] == ["node=h200", "config=ngram_improved"]
    assert [m for m in meta if m.split("=", 1)[0] in specs.STAMP_KEYS] == ["gpu=NVIDIA H200", "driver=580.159.04", "torch_version=2.11.0+cu130", "cuda_version=13.0",
                         f"engine={specs.ENGINE}"]
    assert specs.stamp(s1, FACTS) == s1
    s2 = specs.stamp(s1, {**FACTS, "driver": "999"})
    meta2 = bench_argvs(s2, s2["items"][0])[0]
    assert [m for m in meta2 if m.startswith("driver=")] == ["driver=999"]
    assert json.dumps(made["h200-dummy8b"], sort_keys=True) == before  # input untouched
    assert not any(m.startswith(tuple(f"{k}=" for k in specs.STAMP_KEYS)) for it in made["h200-dummy8b"]["items"]
                   for argv in bench_argvs(made["h200-dummy8b"], it) for m in argv)


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
