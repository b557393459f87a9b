"""Issue 12.4 (provenance in the report) and 12.7 (the SIMULATED stamp on every plot, detected from
several signals). The worker probe runs for real here (bash, sha256sum, the project's python)."""
import base64
import hashlib
import importlib.metadata
import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from specfleet.report import report_campaign
from specfleet.report.scan.folder import scan_folder
from specfleet.facts.worker_provenance import WorkerProvenance
from specfleet.collect.fetch import spec_facts
from specfleet.report.scan.provenance import simulated_signals
from specfleet.report.render.document import MIXED_PLANS_STAMP, NOT_EQUIVALENT_STAMP, SIMULATED_STAMP

from campaign_builder import write_campaign
from tests.shared_data import SHARED, SPEC_BENCH

REPO = Path(__file__).resolve().parents[2]
H200 = SHARED / "fixtures" / "vllm-0.26.0-cuda-h200" / "h200-smollm2" / "h200"


def _venv(tmp_path) -> Path:
    """A venv-shaped folder whose bin/python runs this interpreter, with a specfleet manifest."""
    v = tmp_path / "venv"
    (v / "bin").mkdir(parents=True)
    py = v / "bin" / "python"
    py.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    py.chmod(0o755)
    (v / "specfleet-manifest.json").write_text(json.dumps(
        {"digest": "d1g3st", "python_version": "3.11.2", "packages": {"vllm": "0.26.0"}}))
    return v


@pytest.mark.skipif(not SPEC_BENCH.is_file(), reason=f"the Spec-Bench file is not at {SPEC_BENCH}")
def test_probe_runs_and_hashes_model_and_dataset_with_hostile_paths(tmp_path):
    venv = _venv(tmp_path)
    model = tmp_path / "models" / "Qwen3 32B $(touch pwned)"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "b"}}))
    run = tmp_path / "run dir"
    run.mkdir()
    shutil.copy(SPEC_BENCH, run / "question.jsonl")
    # the dataset path is relative to the run folder; pandas stands in for torch (not installed here)
    fact = WorkerProvenance(str(venv), str(run), str(model), "question.jsonl", dists=("pandas", "torch"))
    p = subprocess.run(["bash", "-c", fact.command()], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    facts = asdict(fact.parse(p.stdout, p.returncode))
    assert not (tmp_path / "pwned").exists() and not (run / "pwned").exists()
    assert facts["dataset_sha256"] == hashlib.sha256(SPEC_BENCH.read_bytes()).hexdigest()
    assert facts["model_config_sha256"] == hashlib.sha256((model / "config.json").read_bytes()).hexdigest()
    assert facts["model_index_sha256"] == \
        hashlib.sha256((model / "model.safetensors.index.json").read_bytes()).hexdigest()
    assert facts["venv_digest"] == "d1g3st" and facts["python"] == "3.11.2"
    assert facts["dists"] == {"pandas": importlib.metadata.version("pandas")}
    assert facts["model_simulated"] is False


def test_the_provenance_fact_reads_gpus_driver_cuda():
    smi = "".join(f"{i}, GPU-{i}, NVIDIA H200, 143771, 0, 580.159.04\n" for i in range(2))  # Gpus' query
    header = "| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |\n"
    sections = [smi, header, "{}\n",
                '{"vllm": "0.26.0", "torch": "2.11.0+cu130"}\n', "", '{"simvllm": {"simulated": true}}\n']
    out = "".join(base64.b64encode(x.encode()).decode() + "\n" for x in sections)  # as sections_script frames them
    f = asdict(WorkerProvenance("/v", "/r", "/m", None).parse(out, 0))
    assert (f["gpu_name"], f["gpu_count"], f["driver"], f["cuda"]) == ("NVIDIA H200", 2, "580.159.04", "13.0")
    assert f["gpu"] == "NVIDIA H200, 580.159.04, 143771 MiB"  # provenance.json's line, as it always read
    assert f["dists"]["torch"] == "2.11.0+cu130" and f["model_simulated"] is True


def test_the_probe_reads_the_testbeds_nvidia_smi_through_the_facts_parsers(tmp_path):
    """The testbed's nvidia-smi stand-in (its output formats) on PATH: GPU lines, driver and the
    driver's CUDA as provenance.json has always recorded them (specfleet.facts.gpus parses them)."""
    from testbed.seed import GPU, gpu_json
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    shutil.copy(REPO / "testbed" / "host" / "gpu-standin", smi)  # the stand-in picks its role by argv[0]
    smi.chmod(0o755)
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "gpu.json").write_text(json.dumps(gpu_json("w1", 2)))
    (tmp_path / "gpu" / "modules").write_text("nvidia\n")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "SIMVLLM_GPU_DIR": str(tmp_path / "gpu")}
    fact = WorkerProvenance(str(tmp_path / "no-venv"), str(tmp_path))
    p = subprocess.run(["bash", "-c", fact.command()], capture_output=True, text=True, env=env, timeout=60)
    f = asdict(fact.parse(p.stdout, p.returncode))
    line = f"{GPU['name']}, {GPU['driver_version']}, {GPU['memory_total_mib']} MiB"
    assert (f["gpu"], f["gpus"], f["gpu_count"]) == (line, [line, line], 2), f
    assert (f["gpu_name"], f["driver"], f["cuda"]) == (GPU["name"], GPU["driver_version"], GPU["cuda_version"]), f
    (tmp_path / "gpu" / "modules").write_text("")  # no driver: no GPU and no CUDA, not an error text as a GPU
    fact = WorkerProvenance(str(tmp_path / "no-venv"), str(tmp_path))
    p = subprocess.run(["bash", "-c", fact.command()], capture_output=True, text=True, env=env, timeout=60)
    f = asdict(fact.parse(p.stdout, p.returncode))
    assert (f["gpu"], f["gpus"], f["gpu_count"], f["driver"], f["cuda"]) == ("", [], 0, "", ""), f


def test_spec_facts_take_sampling_dataset_and_server_line_from_the_typed_spec():
    from specfleet.campaign import Paths, build_run_spec, load_plan
    spec = build_run_spec(load_plan("plans/qwen3-32b-controlled.yml"), "w1", ["vanilla", "ngram"],
                          Paths(venv="/v", work_dir="/w", dataset="/w/d.jsonl"))
    dataset, items = spec_facts(spec.to_json())
    assert dataset == "/w/d.jsonl" and items["ngram"]["sampling"] == {"temperature": "0"}
    argv = items["ngram"]["serve_argv"]
    assert argv[:3] == ["/v/bin/vllm", "serve", "@MODEL@"] and "--speculative-config" in argv
    assert argv[argv.index("--port") + 1] == str(spec.port)
    # an older spec (argv lists) is not recorded, not misread
    assert spec_facts({"items": [{"name": "ngram", "serve_argv": ["vllm"], "bench": [{"argv": []}]}]}) == (None, {})


def _with_provenance(tmp_path) -> Path:
    root = tmp_path / "c"
    shutil.copytree(H200, root / "h200", ignore=shutil.ignore_patterns("*.bench.log"))
    (root / "h200" / "provenance.json").write_text(json.dumps({
        "host": "h200", "gpu": "NVIDIA H200, 580.159.04, 143771 MiB", "gpu_name": "NVIDIA H200",
        "gpu_count": 1, "gpus": ["NVIDIA H200, 580.159.04, 143771 MiB"], "driver": "580.159.04",
        "cuda": "13.0", "venv": {"vllm": "0.26.0"}, "python": "3.12.3", "venv_digest": "abcdef012345",
        "dists": {"vllm": "0.26.0", "torch": "2.11.0+cu130"}, "model_path": "/tmp/sfgpu/models/smollm2-135m",
        "model_config_sha256": "1" * 64, "model_index_sha256": None, "dataset_sha256": "2" * 64,
        "items_facts": {"ngram": {"sampling": {"temperature": "0"}, "serve_argv": []}},
        "items_done": ["vanilla", "ngram", "ngram_improved"]}))
    return root


@pytest.mark.skipif(not H200.is_dir(), reason=f"real vLLM H200 result files not at {H200}")
def test_report_shows_provenance_per_node_and_per_result(tmp_path):
    root = _with_provenance(tmp_path)
    camp = scan_folder(root)
    assert not [w for w in camp.warnings if "provenance.json" in w]  # no spurious "not named" warning
    o = report_campaign(root, quiet=True)
    assert o.merged and not o.simulated
    node = o.tables.provenance.iloc[0]
    assert (node.engine, node.torch, node.gpu, node.gpus, node.driver, node.cuda) == \
        ("vLLM 0.26.0", "2.11.0+cu130", "NVIDIA H200", 1, "580.159.04", "13.0")
    res = o.tables.provenance_results.set_index("config")
    ng = res.loc["ngram"]
    log_first = next(ln for ln in (H200 / "ngram.server.log").read_text().splitlines()
                     if ln.startswith("==== specfleet"))
    assert ng.server_argv == log_first.split(": ", 1)[1].strip()
    assert json.loads(ng.speculative_config)["method"] == "ngram"
    assert ng.engine_speculative_config.startswith("SpeculativeConfig(method='ngram'")
    assert ng.model_config_sha256 == "1" * 12 and ng.dataset_sha256 == "2" * 12
    assert ng.sampling == "temperature=0 (run spec)"
    raw = json.loads((H200 / "ngram_conc1.json").read_text())
    assert ng.plan_hash == raw["plan_hash"]
    assert res.loc["vanilla"].speculative_config == "none"
    md = (root / "report.md").read_text()
    assert "## Provenance per result" in md and "2.11.0+cu130" in md and "NVIDIA H200" in md
    # the notes name the files, never a placeholder (one lacked its f prefix: "{layout.PROVENANCE}")
    assert "(result metadata, provenance.json, server log;" in md and "{layout." not in md


def test_mixed_plan_hashes_are_refused_unless_forced(tmp_path):
    root = write_campaign(tmp_path / "c")
    for f in (root / "w2").glob("*.json"):
        d = json.loads(f.read_text())
        d["plan_hash"] = "0ther0plan00"
        f.write_text(json.dumps(d))
    o = report_campaign(root, quiet=True)
    assert not o.merged and o.exit_code == 8  # nothing merged
    assert any("different plans" in p and "0ther0plan00" in p and "abc123" in p for p in o.gate.problems)
    assert o.gate.nodes_equivalent
    o = report_campaign(root, quiet=True, force=True)
    assert o.merged and MIXED_PLANS_STAMP in o.model.stamps and NOT_EQUIVALENT_STAMP not in o.model.stamps


def test_same_plan_hash_merges(campaign):
    assert report_campaign(campaign, quiet=True).merged


# ------------------------------------------------------------------ simulated: several signals
@pytest.mark.parametrize("signal", ["engine_version", "vllm_version", "provenance", "server_log", "key"])
def test_simulated_inputs_are_detected_without_the_simulated_key(tmp_path, signal):
    extra = {"engine_version": {"engine_version": "simvllm 1.0 (simulated vLLM)"},
             "vllm_version": {"vllm_version": "simvllm 1.0 (simulated vLLM)"},
             "key": {"simulated": True}}.get(signal)
    root = write_campaign(tmp_path / "c", extra=extra)
    if signal == "provenance":
        (root / "w2" / "provenance.json").write_text(json.dumps({"model_simulated": True}))
    if signal == "server_log":
        log = root / "w1" / "ngram.server.log"
        log.write_text("SIMULATED: simvllm 1.0 (simulated vLLM), specfleet-simvllm: no GPU\n" + log.read_text())
    camp = scan_folder(root)
    assert simulated_signals(camp)
    o = report_campaign(root, quiet=True)
    assert SIMULATED_STAMP in o.model.stamps
    html = (root / "report.html").read_text()
    plots = html.split('<div class="plot"')[1:]
    assert len(plots) == 3 and all("<title>SIMULATED ENGINE" in p and "simulated-stamp" in p for p in plots)


def test_real_inputs_have_no_simulated_signal_and_unstamped_plots(campaign):
    assert simulated_signals(scan_folder(campaign)) == []
    report_campaign(campaign, quiet=True)
    html = (campaign / "report.html").read_text()
    assert html.count('<div class="plot"') == 3 and "SIMULATED" not in html


def test_simulated_engine_names_itself(tmp_path):
    root = write_campaign(tmp_path / "c", extra={"simulated": True, "engine": "specfleet-simvllm",
                                                   "engine_version": "simvllm 1.0 (simulated vLLM)",
                                                   "vllm_version": "0.32.0"})
    o = report_campaign(root, quiet=True)
    assert set(o.tables.provenance.engine) == {"simvllm 1.0 (simulated vLLM)"}
    md = (root / "report.md").read_text()
    assert "vLLM 0.32.0" not in md


def test_the_engine_the_worker_observed_is_the_answer_and_nothing_is_sniffed():
    from types import SimpleNamespace
    from specfleet.report.scan.provenance import _sim_result, engine_name, engine_of
    sim = json.dumps({"name": "specfleet-simvllm", "version": "simvllm 1.0 (simulated vLLM)", "simulated": True})
    real = json.dumps({"name": "vllm", "version": "0.26.0", "simulated": False})
    from specfleet.resultfile.legacy import engine_identity

    def as_result(**extra):  # a run without a record: the legacy converter reads its engine_identity
        return SimpleNamespace(result=SimpleNamespace(extra=extra, simulated=extra.get("simulated") is True),
                               record=SimpleNamespace(engine=engine_identity(extra.get("engine_identity"))))
    assert engine_of(as_result(engine_identity=real)) == json.loads(real)
    assert _sim_result(as_result(engine_identity=sim)) and not _sim_result(as_result(engine_identity=real))
    # observed: a real engine is not called simulated for a word in its other keys
    assert not _sim_result(as_result(engine_identity=real, engine_version="simvllm-ish"))
    # without an observation (plain vLLM files, older runners) the signs are still read
    assert _sim_result(as_result(engine_version="simvllm 1.0 (simulated vLLM)"))
    assert engine_name({"engine_identity": sim}, {}, True) == "simvllm 1.0 (simulated vLLM)"
    assert engine_name({"engine_identity": real, "engine": "vllm-cuda (real GPU)"}, {}, False) == \
        "vLLM 0.26.0, vllm-cuda (real GPU)"


def test_a_nesting_bomb_inside_a_results_text_field_is_not_a_recursion_error(tmp_path):
    """A result file within bounds whose text fields hold JSON the report parses again (sampling_params,
    engine_identity, speculative_config): a 100,000-deep string there made every fab report exit 70."""
    from campaign_builder import write_campaign
    bomb = "[" * 100_000 + "]" * 100_000
    camp = write_campaign(tmp_path / "c", extra={"sampling_params": bomb, "engine_identity": bomb})
    out = report_campaign(camp, quiet=True)
    assert out.merged and (camp / "report.md").is_file()
