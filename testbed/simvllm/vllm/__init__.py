"""specfleet-simvllm: a SIMULATED stand-in for vLLM 0.32.0.

It reproduces what a benchmark orchestrator can observe of vLLM (CLI, processes,
logs, HTTP API, Prometheus metrics, `vllm bench serve` result files) on machines
without GPUs.  Every number it produces comes from a calibration table, never
from a measurement.
"""

import json as _json
from pathlib import Path as _Path

# The engine's identity file (specfleet-engine.json beside this file) is what specfleet's worker reads
# (name, version, simulated, the prompt-token counter): the one place these are written.
_IDENTITY = _json.loads(_Path(__file__).with_name("specfleet-engine.json").read_text())
__version__ = "0.32.0"  # the vLLM interface it emulates (CLI, keys, logs), for code that checks it
SIMULATED = _IDENTITY["simulated"]
ENGINE_NAME = _IDENTITY["name"]
VERSION_STRING = _IDENTITY["version"]  # what `vllm --version` prints and the results carry
ENGINE_VERSION = VERSION_STRING.split()[1]  # its own version ("1.0")
