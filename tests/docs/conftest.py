"""The handbook's tests use the testbed fixtures of tests/e2e/conftest.py and tests/e2e/e2e_helpers.py."""
import importlib.util
import sys
from pathlib import Path

E2E = Path(__file__).resolve().parents[1] / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))  # e2e_helpers, imported as the e2e tests import it


def _e2e_conftest():
    # Reuse the module pytest already loaded for tests/e2e (its flock bookkeeping is per module),
    # else load that file once under its own name.
    for mod in list(sys.modules.values()):
        if getattr(mod, "__file__", None) and Path(mod.__file__).resolve() == E2E / "conftest.py":
            return mod
    spec = importlib.util.spec_from_file_location("specfleet_e2e_conftest", E2E / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


_e2e = _e2e_conftest()
testbed_factory = _e2e.testbed_factory
testbed_lock = _e2e.testbed_lock
