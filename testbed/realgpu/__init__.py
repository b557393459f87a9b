"""Real-GPU tier: CUDA vLLM on a lent accelerator machine, driven by specfleet's worker-side runner.

payload.py builds the offline payload here (PyPI), device.sh runs it there, selftest.py checks
the kernels before any server starts, models.py writes the model directories, specs.py turns
plans/ into runner specs, report.py turns a returned result folder into specfleet's report.
See docs/engines-gpu.md.
"""
