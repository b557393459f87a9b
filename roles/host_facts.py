"""Read-only facts about a host: OS, kernel, IPv4 addresses, routes, GPUs and their topology, its venv."""
from __future__ import annotations

from typing import Any

from specfleet.facts.gpus import GpuTopology, Gpus, gpu_report
from specfleet.facts.net import Ipv4Addresses, Routes
from specfleet.facts.system import Hostname, Kernel, OsName, PythonVersion
from specfleet.step import Step, Values


class HostFacts(Step):
    """Changes nothing; reports facts. Used by `fab facts`.

    `gpus_override`: the host's inventory `gpus` var, when it sets one: reported as the
    host's GPUs (source "inventory"), next to what nvidia-smi said. `venv`: the host's `venv_path`,
    whose python must run for a campaign (None: not asked).
    """

    name = "gather facts"

    def __init__(self, gpus_override: Any = None, venv: str | None = None):
        self.gpus_override = gpus_override
        self.venv = venv

    def facts(self) -> dict:
        venv = {"venv": PythonVersion(self.venv.rstrip("/") + "/bin/python")} if self.venv else {}
        return {"os": OsName(), "kernel": Kernel(), "hostname": Hostname(), "addresses": Ipv4Addresses(),
                "routes": Routes(), "gpus": Gpus(), "topology": GpuTopology(), **venv}

    def report(self, facts: Values) -> dict:
        return {
            "os": facts["os"],
            "kernel": facts["kernel"],
            "hostname": facts["hostname"],
            "addresses": [{"iface": a.iface, "ip": a.ip, "prefix": a.prefix, "cidr": a.cidr}
                          for a in facts["addresses"]],
            "routes": [r.line for r in facts["routes"]],
            **gpu_report(facts["gpus"], facts["topology"], self.gpus_override),
            "venv": None if not self.venv else {"path": self.venv, "python": facts["venv"].version},
        }

