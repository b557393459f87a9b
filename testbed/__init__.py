"""specfleet's testbed: fake GPU worker hosts made of network namespaces with real sshd.

    from testbed import Testbed
    tb = Testbed()
    inventory = tb.up(workers=8)      # -> inventory/testbed.yml
    tb.exec("w1", "nvidia-smi")      # verify host state without SSH
    tb.down()

See docs/testbed.md.
"""
from .bed import FAULTS, Testbed
from .net import TestbedError

__all__ = ["FAULTS", "Testbed", "TestbedError"]
