"""specfleet's command line: `fab --list` shows every task.

The tasks themselves live in specfleet/tasks/; this file only hands Fabric the collection.
"""
from specfleet.tasks import ns  # noqa: F401  (Fabric looks for `ns` in the fabfile)
