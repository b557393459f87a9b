"""specfleet's command line: `fab --list` shows every task.

The tasks themselves live in tasks/; this file only hands Fabric the collection.
"""
from tasks import ns  # noqa: F401  (Fabric looks for `ns` in the fabfile)
