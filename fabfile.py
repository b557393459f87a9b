"""specfleet's command line: `fab --list` shows every task.

The tasks themselves live in tasks/; this file only hands Fabric the collection. In a
checkout of the repository it adds the namespace testbed's tasks (testbed/tasks.py): the testbed
is a development tool, not part of the installed package, so a bastion's bundle has none.
"""
import gc

from specfleet.tasks import add_collection, ns  # noqa: F401  (Fabric looks for `ns` in the fabfile)

try:
    from testbed.tasks import ns as _testbed
except ImportError as e:  # an installed bundle: no testbed package beside this file
    if (e.name or "").split(".")[0] != "testbed":
        raise
else:
    add_collection(_testbed)

# Every object the imports made lives until the process ends: out of the cyclic collector's sight, so
# neither a collection during the run nor the interpreter's teardown walks them again. The teardown of
# these modules' objects was ~0.12 s of CPU per `fab` run (of ~0.85 s for a no-op `fab provision`; with
# the freeze ~0.015 s: benchmarks/README.md, "Same checks in every tool").
gc.freeze()
