"""One result file as both sides judge it: its schema (schema.py), and what counts as a run and where
a refused one goes (check.py). `fab collect` (specfleet.collect) checks each file on arrival and the
report (specfleet.report) reads it; both import this, neither imports the other."""
