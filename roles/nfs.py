"""nfs: the storage route through the storage NIC, persisted, and the model share mounted read-only.

Field report §2.4b: after a reboot `192.168.160.0/24 dev ens33 scope link`
sent storage traffic out of the management NIC; NFS hung on ARP timeouts.
The route is checked first (a wrong route costs a 3 s timeout per attempt),
fixed with del + add, persisted with a netplan drop-in where the host uses
netplan, and only then is the share mounted.
"""
from __future__ import annotations

from typing import Annotated

from specfleet.inventory import NEEDED, AbsPath, Address, Host, HostVars, Iface, Ipv4, Ipv4Net, MountOptions
from specfleet.render import render
from specfleet.step import Step
from specfleet.steps.command import Assert
from specfleet.steps.files import Directory, FileContent, LineInFile
from specfleet.steps.guard import OnlyIf
from specfleet.steps.mount import Mount
from specfleet.steps.net import Route
from specfleet.quoting import fstab_line as fstab_fields, q, yaml_str
from specfleet.roles import Role

NETPLAN_FILE = "/etc/netplan/60-specfleet-storage.yaml"
MOUNT_OPTIONS = "ro,vers=4.2,hard,proto=tcp"


class NfsVars(HostVars):
    """Optional at load (a host without a storage NIC skips the role); the role needs each NEEDED one."""

    mgmt_iface: Iface = "ens33"      # named in the netplan file's comment: storage never goes through it
    storage_iface: Annotated[Iface | None, NEEDED] = None
    storage_net: Annotated[Ipv4Net | None, NEEDED] = None
    storage_ip: Annotated[Ipv4 | None, NEEDED] = None
    nfs_server: Annotated[Address | None, NEEDED] = None
    nfs_export: Annotated[AbsPath | None, NEEDED] = None
    nfs_mount: Annotated[AbsPath | None, NEEDED] = None
    nfs_options: MountOptions = MOUNT_OPTIONS


def source(host: Host) -> str:
    v = NfsVars.of(host)
    return f"{v.nfs_server}:{v.nfs_export}"


def fstab_line(host: Host) -> str:
    # each field escaped as fstab wants it (a space is \040): a mount point with a space stays one field;
    # the inventory's options, as the live mount's, so a reboot mounts the share as provision did
    v = NfsVars.of(host)
    return fstab_fields(source(host), v.nfs_mount, "nfs4", f"{v.nfs_options},_netdev,nofail", "0", "0")


def _comment(text: str) -> str:
    """A YAML comment line's text: one line whatever the values hold."""
    return " ".join(text.split())


def steps(host: Host, revert: bool = False) -> list[Step]:
    v = NfsVars.of(host)
    mount, options = v.nfs_mount, v.nfs_options
    netplan = FileContent(NETPLAN_FILE, render(
        "provision/netplan-storage.yaml.j2", storage_iface=yaml_str(v.storage_iface),
        storage_net=yaml_str(v.storage_net), storage_ip=yaml_str(v.storage_ip),
        comment=_comment(f"the storage network goes through {v.storage_iface}, never {v.mgmt_iface}"),
        stale=_comment(f"(field report §2.4b: a stale `{v.storage_net} dev {v.mgmt_iface}` route broke NFS "
                       "after reboot).")),
        mode="0600", present=not revert)
    uses_netplan = "[ -d /etc/netplan ]"
    if revert:
        # the route itself stays: removing a working route is never a fix
        return [Mount(source(host), mount, "nfs4", options, present=False),
                LineInFile("/etc/fstab", fstab_line(host), present=False),
                OnlyIf(uses_netplan, netplan)]
    return [
        Route(v.storage_net, v.storage_iface, src=v.storage_ip),
        OnlyIf(uses_netplan, netplan, otherwise="no netplan: persist the route in the host's network config"),
        LineInFile("/etc/fstab", fstab_line(host)),
        Directory(mount),
        Mount(source(host), mount, "nfs4", options),
        Assert(f"{mount} readable",
               f"[ -n \"$(find {q(mount)}/ -maxdepth 3 -type f -readable -print -quit)\" ]",
               f"nothing readable under {mount}: check the export and the server"),
    ]


ROLE = Role(
    name="nfs",
    summary="the storage route through the storage NIC, persisted, and the model share mounted read-only",
    steps=lambda host, ctx: steps(host),
    revert=lambda host, ctx: steps(host, revert=True),
    vars=NfsVars,
    order=50,
)
