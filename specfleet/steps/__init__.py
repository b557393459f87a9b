"""Steps: pure functions from facts to changes (files, mounts, routes, sync, commands, guards)."""
