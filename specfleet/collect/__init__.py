"""The transport of `fab collect`: list each worker's run folder (the worker is untrusted: untrusted.py),
fetch the finished items over SSH or from Slurm's shared path (fetch.py) into a staging folder, and
put in place only the files that pass (staging.py). What the report then makes of the folder is
specfleet.report's; this package imports nothing of it."""
