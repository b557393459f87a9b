"""A local program a signal ended is named with its signal (issue 28: `rsync exit -9: (no error output)`)."""
import signal
import subprocess

from specfleet.exits import exit_status
from specfleet.collect.fetch import rsync_failure


def test_a_killed_program_is_named_with_its_signal():
    p = subprocess.Popen(["sleep", "30"])
    p.send_signal(signal.SIGKILL)
    rc = p.wait()
    assert rc == -9
    assert exit_status("rsync", rc) == "rsync was killed by SIGKILL (signal 9) before it finished"
    assert exit_status("rsync", 23) == "rsync exit 23"
    msg = rsync_failure("w1", rc, "")
    assert "-9" not in msg and "SIGKILL" in msg and "fab collect` again" in msg and "\n" not in msg
    assert rsync_failure("w1", 12, "rsync: connection\nunexpectedly closed\n").endswith(
        "failed (exit 12): rsync: connection unexpectedly closed")
