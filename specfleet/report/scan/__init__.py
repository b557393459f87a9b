"""The report's first room: what a collected folder holds (folder.py: the runs, quarantined files,
nodes), which node was to run what (cells.py), where each result comes from (provenance.py) and the
plan as it was (plan_snapshot.py). Reads files only; decides nothing."""
