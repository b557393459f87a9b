"""nvidia: the driver's modules load at boot, and the GPU is visible now.

Field report §2.4a: after a kernel upgrade and reboot the GPU vanished. The
module was built for the new kernel (vermagic matched); nothing loaded it at
boot, because no modules-load.d file listed it. `modprobe nvidia` fixed it
until the next reboot; /etc/modules-load.d/nvidia.conf fixed it for good.
"""
from __future__ import annotations

from pydantic import Field

from specfleet.inventory import Host, HostVars, ModuleName
from specfleet.render import render
from specfleet.shell import q
from specfleet.facts.gpus import Gpus
from specfleet.facts.system import Kernel, ModuleVermagic
from specfleet.step import Change, Step, StepFailed, Values
from specfleet.steps.files import FileContent
from specfleet.roles import Role

MODULES = ["nvidia", "nvidia_uvm", "nvidia_modeset"]
CONF = "/etc/modules-load.d/nvidia.conf"


class NvidiaVars(HostVars):
    nvidia_modules: list[ModuleName] = Field(default=MODULES, min_length=1)


class DriverLoaded(Step):
    """`nvidia-smi` reaches the driver; if not, diagnose, then modprobe the modules."""

    name = "nvidia driver loaded"

    def __init__(self, modules: list[str]):
        self.modules = modules

    def facts(self) -> dict:
        return {"gpus": Gpus(), "kernel": Kernel(), "vermagic": ModuleVermagic("nvidia")}

    def decide(self, facts: Values) -> list[Change]:
        if facts["gpus"].visible:
            return []
        kernel, vermagic = facts["kernel"], facts["vermagic"]
        if vermagic and vermagic != kernel:
            raise StepFailed(
                f"the nvidia module is built for kernel {vermagic}, but {kernel} is running: "
                "install the driver's module for this kernel (DKMS) or boot the matching kernel")
        # verified in the same command: one nvidia-smi call per run when all is well
        verify = ("{ nvidia-smi -L >/dev/null 2>&1 || { echo 'GPU still not visible after modprobe: "
                  "check dmesg for NVRM errors' >&2; exit 1; }; }")
        return [Change(f"modprobe {' '.join(self.modules)} (GPU not visible)",
                       " && ".join(f"modprobe {q(m)}" for m in self.modules) + " && " + verify)]


def steps(host: Host, revert: bool = False) -> list[Step]:
    modules = list(NvidiaVars.of(host).nvidia_modules)
    if revert:
        # revert removes the boot-time file only: unloading a driver under a
        # running workload is never what anyone wants
        return [FileContent(CONF, present=False)]
    return [
        FileContent(CONF, render("provision/nvidia-modules.conf.j2", modules=modules)),
        DriverLoaded(modules),
    ]


ROLE = Role(
    name="nvidia",
    summary="the GPU kernel modules loaded now and at boot (modules-load.d)",
    steps=lambda host, ctx: steps(host),
    revert=lambda host, ctx: steps(host, revert=True),
    vars=NvidiaVars,
    order=40,
)
