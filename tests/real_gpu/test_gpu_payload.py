"""The payload builder's logic on small inputs: wheel pins, trim, kit, manifest, per-call budget."""
import json
from pathlib import Path

import pytest

from testbed.realgpu import payload
from testbed.realgpu.devices import H200, MIB

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "datasets" / "sample" / "question.jsonl"


def test_every_wheel_is_pinned_once():
    names = [w.partition("==")[0].replace("_", "-").lower() for w in payload.WHEELS]
    assert all("==" in w for w in payload.WHEELS)
    assert len(names) == len(set(names))
    assert "vllm" not in names and "torch" not in names   # vLLM comes from the profile; torch from the image


def test_wheel_name_matching_and_missing():
    assert payload.wheel_name_matches("pydantic_core-2.50.5-cp312-cp312-manylinux_2_17_x86_64.whl", "pydantic-core==2.50.5")
    assert payload.wheel_name_matches("outlines_core-0.2.14-cp312-abi3-x.whl", "outlines_core==0.2.14")
    assert not payload.wheel_name_matches("pydantic-2.14.4-py3-none-any.whl", "pydantic-core==2.14.4")
    assert not payload.wheel_name_matches("pydantic-2.14.3-py3-none-any.whl", "pydantic==2.14.4")


def test_missing_wheels(tmp_path):
    (tmp_path / "cbor2-6.3.0-cp312-cp312-manylinux_2_17_x86_64.whl").write_bytes(b"")
    assert payload.missing_wheels(tmp_path, ["cbor2==6.3.0", "distro==1.9.0"]) == ["distro==1.9.0"]


def test_download_argv_targets_the_device_python():
    argv = payload.download_argv("py", H200, Path("/w"), ["x==1"])
    assert argv[:5] == ["py", "-m", "pip", "download", "-q"]
    assert "--no-deps" in argv and "--only-binary=:all:" in argv
    assert argv[argv.index("--python-version") + 1] == "3.12"
    assert "manylinux_2_28_x86_64" in argv and argv[-1] == "x==1"


def test_trim_removes_only_what_a_dense_sm90_model_never_loads(tmp_path):
    site = tmp_path / "site"
    keep = ["vllm/_C_stable_libtorch.abi3.so", "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
            "vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so"]
    drop = ["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so", "bin/vllm",
            "vllm/vllm-rs/x", "vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so",
            "vllm/third_party/deep_gemm/_C.cpython-313-x86_64-linux-gnu.so"]
    for rel in keep + drop:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(b"x")
    removed = payload.trim(site)
    assert all((site / k).exists() for k in keep)
    assert not any((site / d).exists() for d in drop)
    assert "bin" in removed and "vllm/vllm-rs" in removed
    assert payload.trim(site) == []   # a second run finds nothing to do


def test_manifest_roundtrip_and_tamper(tmp_path):
    (tmp_path / "kit").mkdir()
    (tmp_path / "a.bin").write_bytes(b"aaa")
    (tmp_path / "kit" / "b.txt").write_text("b")
    m = payload.write_manifest(tmp_path)
    lines = m.read_text().splitlines()
    assert [ln.split("  ")[1] for ln in lines] == ["a.bin", "kit/b.txt"]
    assert payload.verify_manifest(tmp_path) == []
    (tmp_path / "a.bin").write_bytes(b"aab")
    (tmp_path / "kit" / "c.txt").write_text("new")
    (tmp_path / "kit" / "b.txt").unlink()
    assert sorted(payload.verify_manifest(tmp_path)) == ["a.bin: checksum mismatch", "kit/b.txt: missing",
                                                          "kit/c.txt: not in the manifest"]


def test_manifest_is_sha256sum_compatible(tmp_path):
    import subprocess
    (tmp_path / "x").write_bytes(b"payload")
    payload.write_manifest(tmp_path)
    assert subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], cwd=tmp_path).returncode == 0
    (tmp_path / "x").write_bytes(b"payloaD")
    assert subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], cwd=tmp_path,
                          capture_output=True).returncode != 0


def test_budget_fits_and_overflows():
    left = payload.check_budget(50 * MIB, {"main": 1 * MIB, "wt": 3 * MIB}, H200)
    assert left == 64 * MIB - 2 * MIB - 3 * MIB - 50 * MIB
    with pytest.raises(payload.BuildError, match=r"call carries 60\.0 MiB; with the sent tree wt \(3\.0 MiB\).*by 1\.0 MiB"):
        payload.check_budget(60 * MIB, {"main": 1 * MIB, "wt": 3 * MIB}, H200)


def test_tree_bytes_counts_tracked_and_untracked_not_ignored(tmp_path):
    import subprocess
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/big\n")
    (tmp_path / "a").write_bytes(b"x" * 100)
    (tmp_path / "big").write_bytes(b"x" * 10000)
    assert payload.tree_bytes(tmp_path) == 100 + len("/big\n")


def test_build_kit_holds_the_device_side(tmp_path):
    if not SAMPLE.is_file():
        pytest.skip(f"{SAMPLE} missing")
    specs = payload.build_kit(tmp_path / "kit", SAMPLE)
    kit = tmp_path / "kit"
    for name in payload.KIT_FILES + ("runner.pyz", "question.jsonl"):
        assert (kit / name).is_file(), name
    assert "h200-dummy8b.json" in specs
    spec = json.loads((kit / "specs" / "h200-dummy8b.json").read_text())
    assert [i["name"] for i in spec["items"]] == ["vanilla", "ngram_improved"]
    assert spec["venv"] == "/tmp/vllm-venv" and spec["env_file"] == "/tmp/sfgpu/vllm.env"
    assert spec["expected_vllm_version"] == H200.vllm
    # a second build gives the same kit
    payload.build_kit(tmp_path / "kit", SAMPLE)
    assert json.loads((kit / "specs" / "h200-dummy8b.json").read_text()) == spec


def test_build_kit_without_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(payload.BuildError, match="question file is missing"):
        payload.build_kit(tmp_path / "kit", tmp_path / "nope.jsonl")


def test_split_file_reassembles_and_names_the_whole(tmp_path):
    import hashlib
    import os
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(os.urandom(10_001))
    carry, kit = tmp_path / "carry", tmp_path / "carry" / "kit"
    kit.mkdir(parents=True)
    parts = payload.split_file(gguf, carry, payload.GGUF, 3)
    assert [p.name for p in parts] == ["part-0", "part-1", "part-2"]
    assert [p.stat().st_size for p in parts] == [3334, 3334, 3333]
    assert b"".join(p.read_bytes() for p in parts) == gguf.read_bytes()
    assert (kit / "gguf.sha256").read_text() == f"{hashlib.sha256(gguf.read_bytes()).hexdigest()}  m.gguf\n"
    assert payload.split_file(gguf, carry, payload.GGUF, 2) == parts[:2]     # a new split: no stale part-2
    assert sorted(p.name for p in (carry / "gguf").iterdir()) == ["part-0", "part-1"]


@pytest.mark.parametrize("whole, room, extra, n", [
    (100, 100, 0, 1), (101, 100, 0, 2), (100, 100, 1, 2), (200, 100, 0, 2), (200, 100, 1, 3),
    (48 * MIB, 44 * MIB, MIB // 2, 2), (94 * MIB, 44 * MIB, 0, 3)])
def test_parts_needed_is_the_fewest_that_fit(whole, room, extra, n):
    got = payload.parts_needed(whole, room, extra)
    step = -(-whole // got)
    assert got == n and step <= room and whole - (got - 1) * step + extra <= room
    if got > 1:      # one fewer would not fit
        step = -(-whole // (got - 1))
        assert step > room or whole - (got - 2) * step + extra > room


def test_parts_needed_without_room_says_so():
    with pytest.raises(payload.BuildError, match="no room for any part"):
        payload.parts_needed(100, 10, last_extra=10)


def _built(tmp_path, site_bytes: int, gguf_bytes: int):
    """A built carry folder's inputs, small: the kit, the tokenizer, stage/site.tar.xz, the GGUF."""
    import os
    out = tmp_path / ".realgpu"
    carry, stage = out / "carry", out / "stage"
    (carry / "kit").mkdir(parents=True)
    (carry / "kit" / "device.sh").write_bytes(os.urandom(20_000))
    (carry / "tok.tar.xz").write_bytes(os.urandom(30_000))
    (stage / "models").mkdir(parents=True)
    (stage / payload.SITE_XZ).write_bytes(os.urandom(site_bytes))
    (stage / "models" / Path(payload.GGUF_IN_WHEEL).name).write_bytes(os.urandom(gguf_bytes))
    return carry, stage


def test_the_calls_are_planned_for_the_tree_that_travels(tmp_path, capsys):
    """The same payload in fewer calls beside a small checkout than beside a grown one; every call
    within the limit less the slack, with the largest tree; the whole files never carried."""
    from dataclasses import replace
    prof = replace(H200, call_bytes=1000_000, slack_bytes=50_000)
    carry, stage = _built(tmp_path, site_bytes=600_000, gguf_bytes=1_000_000)
    calls = payload.split_for_calls(carry, stage, {"profile": "x"}, {"small": 10_000}, prof)
    assert [c["name"] for c in calls] == ["site 1/1 + tokenizer", "GGUF 1/2", "GGUF 2/2"]
    assert calls[0]["paths"] == ["kit", "MANIFEST.sha256", "payload.json", "site/part-0", "tok.tar.xz"]
    grown = payload.split_for_calls(carry, stage, {"profile": "x"}, {"small": 10_000, "grown": 400_000}, prof)
    assert [c["name"] for c in grown] == ["site 1/2", "site 2/2 + tokenizer", "GGUF 1/3", "GGUF 2/3", "GGUF 3/3"]
    assert all(c["bytes"] + 400_000 <= prof.call_bytes - prof.slack_bytes for c in grown), grown
    assert not (carry / payload.SITE_XZ).exists() and sorted(p.name for p in (carry / "site").iterdir()) == ["part-0", "part-1"]
    assert not payload.verify_manifest(carry)
    info = json.loads((carry / "payload.json").read_text())
    assert info["profile"] == "x" and info["files"]["site/part-1"] == (carry / "site" / "part-1").stat().st_size
    plan = json.loads((carry.parent / "calls.json").read_text())
    assert plan["trees"] == {"small": 10_000, "grown": 400_000} and plan["calls"] == grown
    printed = capsys.readouterr().out
    assert "grown 0.4 MiB" in printed and "call 1. site 1/2:" in printed
    assert "carry [.realgpu/carry/kit, .realgpu/carry/MANIFEST.sha256, .realgpu/carry/payload.json, " \
           ".realgpu/carry/site/part-0]; bash .realgpu/carry/kit/device.sh stash" in printed
    # a tree that leaves no room is a clear error, not a plan
    with pytest.raises(payload.BuildError, match="no room for any part"):
        payload.split_for_calls(carry, stage, {}, {"huge": 900_000}, prof)


def test_a_call_over_the_limit_is_named(tmp_path):
    from dataclasses import replace
    prof = replace(H200, call_bytes=1000_000, slack_bytes=50_000)
    carry, stage = _built(tmp_path, site_bytes=600_000, gguf_bytes=100_000)
    calls = payload.split_for_calls(carry, stage, {}, {"t": 10_000}, prof)
    with pytest.raises(payload.BuildError, match=r"call 'site 1/1 \+ tokenizer' \(kit, .*site/part-0, tok.tar.xz\)"):
        payload.check_calls(calls, {"t": 600_000}, prof)


def test_split_moves_an_older_builds_whole_site_and_joins_its_gguf_parts(tmp_path):
    """--split on a carry folder built before the split (site.tar.xz in the carry folder, the GGUF only
    as its parts, no stage/): the archive moves to stage/, the GGUF is joined and checked, both re-split."""
    import os
    import shutil
    carry, stage = _built(tmp_path, site_bytes=300_000, gguf_bytes=200_000)
    gguf = stage / "models" / Path(payload.GGUF_IN_WHEEL).name
    whole = gguf.read_bytes()
    payload.split_file(gguf, carry, payload.GGUF, 2)
    gguf.unlink()
    os.replace(stage / payload.SITE_XZ, carry / payload.SITE_XZ)
    shutil.rmtree(stage)                     # a copy of the carry folder alone, as the session's checkout holds
    (carry / "payload.json").write_text('{"profile": "old"}')
    assert payload.main(["--out", str(carry.parent), "--split", "--tree", str(REPO)]) == 0
    assert (stage / payload.SITE_XZ).is_file() and not (carry / payload.SITE_XZ).exists()
    assert gguf.read_bytes() == whole
    assert payload.main(["--out", str(carry.parent), "--plan", "--tree", str(REPO)]) == 0
    assert payload.main(["--out", str(tmp_path / "nothing-built"), "--plan", "--tree", str(REPO)]) == 1


def test_device_copies_every_runner_file_and_the_copy_imports(tmp_path):
    """device.sh copies the kit's runner-files.txt (the worker program, one zipapp built from
    specfleet.worker), so a module added to the worker travels without a list to update; the copy runs alone."""
    import subprocess
    import sys
    from specfleet.worker import layout
    if not SAMPLE.is_file():
        pytest.skip(f"{SAMPLE} missing")
    kit = tmp_path / "kit"
    payload.build_kit(kit, SAMPLE)
    listed = (kit / "runner-files.txt").read_text().split()
    assert listed == [layout.RUNNER_ARTEFACT]
    assert 'done <"$K/runner-files.txt"' in (payload.HERE / "device.sh").read_text()
    d = tmp_path / "d"
    d.mkdir()
    for name in listed:
        (d / name).write_bytes((kit / name).read_bytes())
    p = subprocess.run([sys.executable, "-S", "-I", str(d / layout.RUNNER_ARTEFACT), "--help"],
                       capture_output=True, text=True, cwd=d)
    assert p.returncode == 0 and "--spec" in p.stdout, p.stderr
