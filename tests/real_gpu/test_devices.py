"""The vLLM <-> torch pin: chosen from the profile's torch, checked against the wheel's METADATA."""
import zipfile

import pytest

from testbed.realgpu.devices import H200, VLLM_TORCH_PINS, PinError, check_pin, choose_vllm, torch_pin


def _wheel(tmp_path, requires):
    p = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    meta = "Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("vllm-9.9.9.dist-info/METADATA", meta)
        z.writestr("vllm/__init__.py", "")
    return p


def test_choose_vllm_is_the_newest_release_pinned_to_the_image_torch():
    assert choose_vllm("2.11.0+cu130") == "0.26.0"
    assert choose_vllm("2.13.0") == "0.28.0"
    assert H200.vllm == choose_vllm(H200.torch)
    assert VLLM_TORCH_PINS["0.28.0"] != H200.torch  # the field report's release does not fit the H200 image


def test_choose_vllm_unknown_torch_names_the_known_pins():
    with pytest.raises(PinError, match=r"no known vLLM release pins torch 2\.9\.0.*0\.26\.0->2\.11\.0"):
        choose_vllm("2.9.0")


def test_torch_pin_ignores_extras_and_ranges():
    assert torch_pin(["numpy", "torch==2.11.0", "xformers; extra == 'x'"]) == "2.11.0"
    assert torch_pin(["torch==2.13.0; extra == 'bench'", "torch>=2.1"]) is None
    assert torch_pin(["torch (==2.11.0)"]) == "2.11.0"


def test_check_pin_accepts_matching_wheel(tmp_path):
    assert check_pin(_wheel(tmp_path, ["torch==2.11.0", "numpy"]), H200) == "2.11.0"


def test_check_pin_refuses_other_torch_and_suggests_release(tmp_path):
    with pytest.raises(PinError, match=r"pins torch 2\.13\.0 but the nvidia-h200 image has torch 2\.11\.0: choose vLLM 0\.26\.0"):
        check_pin(_wheel(tmp_path, ["torch==2.13.0"]), H200)


def test_check_pin_refuses_unpinned_wheel(tmp_path):
    with pytest.raises(PinError, match="no 'torch==' requirement"):
        check_pin(_wheel(tmp_path, ["torch>=2.0"]), H200)


def test_one_payload_serves_the_lent_h100_and_h200():
    from testbed.realgpu.devices import H100, PROFILES, payload_key, serves
    assert set(PROFILES) == {"nvidia-h100-x1", "nvidia-h200"}   # the lent single-GPU kinds
    assert payload_key(H100) == payload_key(H200)                # same image, same sm_90: the same bytes
    assert serves(H100) == serves(H200) == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    # each profile's GPU name is what the report's bandwidth look-up knows
    from specfleet.report.tables.diagnosis import bandwidth_of
    assert bandwidth_of(H100.gpu_name)[0] == 3350 and bandwidth_of(H200.gpu_name)[0] == 4800
