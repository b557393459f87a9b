"""specfleet's exit codes, in one place: bit flags a run ORs together (6: some host failed and some
was unreachable; 24: nothing merged and cells missing), then the codes that stand alone (sysexits'
where one fits). docs/concepts.md, "The recap and exit codes", is the table users read.

The hosts' own outcomes give EXIT_FAILED and EXIT_UNREACHABLE (fleet.Fleet.exit_code); collect's and
report's verdicts on the bastion give EXIT_NOT_MERGED, EXIT_INCOMPLETE and EXIT_ASSERTION
(`Fleet.verdict`, report.build.Outcome.exit_code); compare's, EXIT_REGRESSION.
"""
from __future__ import annotations

import signal

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_FAILED = 2
EXIT_UNREACHABLE = 4  # bit flags: 6 = some failed and some unreachable
EXIT_NOT_MERGED = 8   # collect: the nodes were not equivalent (or nothing valid), nothing merged
EXIT_INCOMPLETE = 16  # collect/report: some planned (configuration, concurrency, node) cell is not merged
EXIT_ASSERTION = 32  # collect/report/compare: an assertion of the plan failed or could not be checked
EXIT_REGRESSION = 64  # compare --fail-on regression: a cell or speedup of the candidate regressed
EXIT_UNDECIDABLE = EXIT_INCOMPLETE  # compare --fail-on regression: a figure had one run on a side (no test); as
#                                    in collect/report, something that was to be judged was not
EXIT_CRASHED = 70     # specfleet itself failed (a bug): sysexits' EX_SOFTWARE; the traceback is in the log
EXIT_NOT_WRITABLE = 73  # collect/report: the results folder is read-only or not writable (EX_CANTCREAT)
EXIT_DISK_FULL = 74     # collect/report: the bastion's disk is full (ENOSPC/EDQUOT; sysexits' EX_IOERR)
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, what shells report for a process a SIGINT ended


def exit_status(program: str, rc: int) -> str:
    """`rsync exit 23`, or for a process a signal ended (subprocess's negative code) `rsync was killed
    by SIGKILL (signal 9)`: never `exit -9`."""
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = "a signal"
        return f"{program} was killed by {name} (signal {-rc}) before it finished"
    return f"{program} exit {rc}"
