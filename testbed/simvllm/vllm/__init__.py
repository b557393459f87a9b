"""specfleet-simvllm: a SIMULATED stand-in for vLLM 0.32.0.

It reproduces what a benchmark orchestrator can observe of vLLM (CLI, processes,
logs, HTTP API, Prometheus metrics, `vllm bench serve` result files) on machines
without GPUs.  Every number it produces comes from a calibration table, never
from a measurement.
"""

__version__ = "0.32.0"  # the vLLM interface it emulates (CLI, keys, logs), for code that checks it
SIMULATED = True
ENGINE_NAME = "specfleet-simvllm"
ENGINE_VERSION = "1.0"  # its own version: what `vllm --version` prints and the results carry
VERSION_STRING = f"simvllm {ENGINE_VERSION} (simulated vLLM)"
