"""Every tier: Ctrl-C reaches the commands the tests start.

A shell without job control starts background jobs (`.ci/run &`, nohup, some CI runners) with SIGINT
ignored, and an ignored signal stays ignored across exec: the `fab` a test interrupts would never see
its Ctrl-C (no KeyboardInterrupt, no exit 130) and the tests of that path would fail for a reason that
is not the product's. A handler, unlike SIG_IGN, is reset to the default at exec, so installing
Python's own here gives every child the terminal's behaviour.
"""
import signal

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# each tier's wall time at the end, and the suite shared by several processes (scripts/test-shards)
pytest_plugins = ("tests.sharding",)
