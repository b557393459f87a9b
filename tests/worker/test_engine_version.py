"""The runner's preflight reads the engine version from the venv's package metadata, never by
importing vLLM (`vllm --version` imports torch and vLLM: 21 s on the H200); the simulated engine
still names itself."""
import json
import sys
from pathlib import Path

import pytest

from specfleet.worker.runner import EXIT_FAILED, EXIT_OK
from specfleet.worker.host import ItemFailed, engine_identity

SIMVLLM = Path(__file__).resolve().parents[2] / "testbed" / "simvllm" / "vllm"
SIM_VERSION = "simvllm 1.0 (simulated vLLM)"


def site(tmp: Path, version: str | None = "0.26.0", package: str = "raises") -> Path:
    """A site dir as `pip install --target` leaves it: vllm/ and vllm-<version>.dist-info/.
    package "raises": a vLLM whose import fails loudly (so any import is seen); "sim": the simulator."""
    s = tmp / "site"
    if package == "sim":
        import shutil
        shutil.copytree(SIMVLLM, s / "vllm")
    else:
        (s / "vllm").mkdir(parents=True)
        (s / "vllm" / "__init__.py").write_text("raise RuntimeError('vllm was imported')\n")
    if version:
        d = s / f"vllm-{version}.dist-info"
        d.mkdir()
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
        (d / "RECORD").write_text("vllm/__init__.py,,\n")
    return s


def python_with(tmp: Path, path: Path) -> Path:
    """<venv>/bin/python as device.sh writes it: the interpreter with the site on PYTHONPATH."""
    py = tmp / "venv" / "bin" / "python"
    py.parent.mkdir(parents=True, exist_ok=True)
    py.write_text(f"#!/bin/sh\nexport PYTHONPATH={path}\nexec {sys.executable} \"$@\"\n")
    py.chmod(0o755)
    return py


def test_real_vllm_version_comes_from_its_dist_info_without_importing_it(tmp_path):
    py = python_with(tmp_path, site(tmp_path))
    assert engine_identity(str(py), {"PATH": "/usr/bin:/bin"}) == {"name": "vllm", "version": "0.26.0", "simulated": False}


def test_the_simulator_names_itself_even_beside_vllm_metadata(tmp_path):
    py = python_with(tmp_path, site(tmp_path, version="0.26.0", package="sim"))
    assert engine_identity(str(py), {"PATH": "/usr/bin:/bin"}) == {"name": "specfleet-simvllm", "version": SIM_VERSION,
                                                                    "simulated": True}


@pytest.mark.parametrize("version, package, why", [(None, "raises", "has no `vllm` distribution metadata"),
                                                   (None, "none", "no `vllm` package")])
def test_no_version_is_a_clear_item_failure(tmp_path, version, package, why):
    s = site(tmp_path, version=version) if package != "none" else tmp_path / "empty"
    py = python_with(tmp_path, s)
    with pytest.raises(ItemFailed, match="the engine version could not be read") as e:
        engine_identity(str(py), {"PATH": "/usr/bin:/bin"})
    assert why in str(e.value) and "vllm was imported" not in str(e.value)


def _venv_of_a_real_vllm(bed, tmp_path, version="0.26.0"):
    """The bed's venv with a python whose `vllm` raises on import (a CUDA vLLM, without a GPU)."""
    s = site(tmp_path / "real", version=version)
    (bed.venv / "bin" / "python").write_text(f"#!/bin/sh\nPYTHONPATH={s} exec {sys.executable} \"$@\"\n")


def _spec_without_fit(bed, plan):
    """The prompt-fit check would count tokens with this vLLM's tokenizer: not what is tested here."""
    path = bed.spec(plan, queue=["vanilla"])
    spec = json.loads(path.read_text())
    for it in spec["items"]:
        it.pop("fit", None)
    path.write_text(json.dumps(spec))
    return path


def test_runner_preflight_records_the_metadata_version_and_never_imports_vllm(bed, tmp_path):
    _venv_of_a_real_vllm(bed, tmp_path)
    plan = bed.plan()
    plan.vllm_version = "0.26.0"
    assert bed.run(_spec_without_fit(bed, plan)) == EXIT_OK, bed.log()
    st = bed.state()
    assert st["vllm_version"] == "0.26.0" and st["items"][0]["status"] == "done"
    result = json.loads((bed.run_dir / "vanilla_conc1.json").read_text())
    assert result["vllm_version"] == "0.26.0"
    # the engine the worker observed, in every result: what the report reads (provenance.engine_of)
    assert json.loads(result["engine_identity"]) == st["engine"] == {"name": "vllm", "version": "0.26.0",
                                                                     "simulated": False}


def test_runner_preflight_refuses_a_version_the_plan_does_not_pin(bed, tmp_path):
    _venv_of_a_real_vllm(bed, tmp_path)
    plan = bed.plan()
    plan.vllm_version = "0.28.0"
    assert bed.run(_spec_without_fit(bed, plan)) == EXIT_FAILED
    assert bed.items()["vanilla"]["error"] == "the venv has vLLM 0.26.0, the plan pins 0.28.0"


def test_runner_preflight_refuses_a_venv_without_vllm(bed):
    (bed.venv / "bin" / "vllm").unlink()
    assert bed.run(bed.spec(bed.plan(), queue=["vanilla"])) == EXIT_FAILED
    assert "bin/vllm is missing or not executable" in bed.items()["vanilla"]["error"]
