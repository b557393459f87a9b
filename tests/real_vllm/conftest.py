"""Fixtures of the real-vLLM tier.

The fleet test (test_real_vllm_fleet.py) brings up the namespace testbed with the e2e tier's
fixture, which holds the machine-wide flock on /run/specfleet-testbed.lock for its whole life.
tests/e2e has no __init__.py, so pytest imports its conftest as a top-level `conftest`; importing
it here gives a second module object with its own re-entrancy counter. That is harmless as long
as no e2e module-scoped testbed (testbed4) is alive while these tests run, which pytest
guarantees by tearing module fixtures down at the module boundary.
"""
from tests.e2e.conftest import testbed_factory, testbed_lock  # noqa: F401
