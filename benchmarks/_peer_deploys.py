"""What pyinfra and Ansible run in provision_vs_peers.py: the files each tool is given, written from what
specfleet's roles render, so no tool undoes another's work.

Two sets of checks (`--peer-checks`):
  - `same` (the default): every check specfleet's `fab provision --only venv-deploy,env,nvidia,nfs` makes
    on a worker (its 14 steps, 17 probes; the table in benchmarks/README.md), each in the tool's own
    idiom: pyinfra facts (`Command`, `File`, `Link`, `Directory`, ...) and operations that run only when a
    fact says so; Ansible `command`/`stat`/`slurp`/`find` tasks with `changed_when: false` and fixes under
    `when:`. A check whose only use is to explain a failure (the kernel and the module's vermagic when no
    GPU is visible) runs only then, as a user of those tools writes it; specfleet has them in its batch.
  - `subset`: the smaller deploys of the figures up to 2026-12-02 (modules-load file, route, mount, venv
    sync, env file), so those figures stay reproducible.
"""
from __future__ import annotations

import json
import os
import shlex
import textwrap
from pathlib import Path

from specfleet.quoting import q

CHECKS = ("same", "subset")
# Ansible's ControlMasters: a short directory, since a socket path (here + %C's 40 characters + ssh's
# 17-character temporary suffix) must fit a Unix socket's 108 bytes; removed at the end
CONTROL_DIR = Path(f"/tmp/sfb-cp-{os.getpid()}")
# the subset deploys' mount, as they were written (the same-checks deploys take it from the inventory)
MOUNT_CMD = "mount -t nfs4 -o ro,vers=4.2,hard,proto=tcp 192.168.160.7:/media/SSD-Storage/SW /mnt/fabrix"
GPU_QUERY = ("nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,driver_version "
             "--format=csv,noheader,nounits")  # = specfleet.facts.gpus.Gpus


def _one(values: set, what: str):
    if len(values) != 1:
        raise SystemExit(f"hosts want different {what}; this benchmark assumes one for all workers")
    return values.pop()


def contents(inv) -> dict:
    """The exact file contents, paths and commands specfleet's roles want on each worker."""
    from specfleet import venv_build as venv_role
    from specfleet.render import render
    from specfleet.roles import env, nfs, nvidia
    from specfleet.roles.venv_deploy import release_id, releases_dir  # <digest>-<listing hash>, as deployed
    from specfleet.steps.guard import OnlyIf
    hosts = inv.select("workers")
    manifest = venv_role.read_manifest(inv.bastion_vars.get("venv_path") or hosts[0].var("venv_path"))
    if not manifest:
        raise SystemExit("no bastion venv manifest: the converge run of fab provision should have built it")
    pyver = manifest["python_version"].rsplit(".", 1)[0]
    venv = _one({h.require("venv_path").rstrip("/") for h in hosts}, "venv paths")
    modules = _one({tuple(h.require("nvidia_modules")) for h in hosts}, "nvidia modules")
    netplan = {}
    for h in hosts:
        [step] = [s.step for s in nfs.steps(h) if isinstance(s, OnlyIf) and s.step.path == nfs.NETPLAN_FILE]
        netplan[h.name] = step.payload.data.decode()
    mount = _one({h.require("nfs_mount") for h in hosts}, "mount points")
    options = _one({h.require("nfs_options") for h in hosts}, "mount options")
    source = _one({nfs.source(h) for h in hosts}, "shares")
    return {
        "env": _one({env.content(h, pyver) for h in hosts}, "env files"),
        "modules": render("provision/nvidia-modules.conf.j2", modules=list(modules)), "module_names": modules,
        "venv": venv, "releases": releases_dir(venv), "release": f"{releases_dir(venv)}/{release_id(venv, manifest)}",
        "env_file": _one({h.require("env_file") for h in hosts}, "env file paths"), "modules_file": nvidia.CONF,
        "base_python": manifest["base_python"], "python_minor": pyver,
        "imports": "; ".join(f"import {m}" for m in manifest.get("packages", {}) or {"sys": None}),
        "netplan": netplan, "netplan_file": nfs.NETPLAN_FILE,
        "fstab": _one({nfs.fstab_line(h) for h in hosts}, "fstab lines"),
        "mount": mount, "source": source, "mount_cmd": f"mkdir -p -- {q(mount)} && mount -t nfs4 -o {q(options)} "
                                                         f"{q(source)} {q(mount)}",
        "readable": f"find {q(mount + '/')} -maxdepth 3 -type f -readable -print -quit",
        "storage_net": _one({h.require("storage_net") for h in hosts}, "storage nets"),
        "storage_iface": _one({h.require("storage_iface") for h in hosts}, "storage interfaces"),
    }


def ssh_opts(host, control_dir: Path | None) -> list[str]:
    opts = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={host.known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]
    if control_dir:
        opts += ["-o", "ControlMaster=auto", "-o", f"ControlPath={control_dir}/%C", "-o", "ControlPersist=60"]
    else:
        opts += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
    return opts


def _route_fix(c: dict, src: str) -> str:
    """`src`: shell text (an address quoted by specfleet's q, or Ansible's `{{ storage_ip | quote }}`)."""
    net, iface = q(c["storage_net"]), q(c["storage_iface"])
    return f"ip route del {net} 2>/dev/null; ip route add {net} dev {iface} scope link src {src}"


def _modprobe(c: dict) -> str:
    # as specfleet's DriverLoaded: load the modules, then verify in the same command
    return (" && ".join(f"modprobe {q(m)}" for m in c["module_names"])
            + " && nvidia-smi -L >/dev/null 2>&1")


# ---- Ansible ------------------------------------------------------------------------------
def _quiet(task: dict, **kw) -> dict:
    """A check: reports, never changes."""
    return {**task, "changed_when": False, **kw}


def _ansible_subset(d: Path, c: dict) -> list[dict]:
    return [
        {"name": "modules-load file", "ansible.builtin.copy": {
            "src": str(d / "modules.conf"), "dest": c["modules_file"], "mode": "0644"}},
        {"name": "storage route (check)", "ansible.builtin.command": "ip -o -4 route show exact 192.168.160.0/24",
         "register": "route", "changed_when": False},
        {"name": "storage route (fix)", "ansible.builtin.shell":
            "ip route del 192.168.160.0/24 2>/dev/null; "
            "ip route add 192.168.160.0/24 dev ens35 scope link src {{ storage_ip }}",
         "when": "'dev ens35' not in route.stdout"},
        {"name": "share mounted (check)", "ansible.builtin.command": "findmnt -n --mountpoint /mnt/fabrix",
         "register": "mnt", "changed_when": False, "failed_when": False},
        {"name": "share mounted (mount)", "ansible.builtin.shell": f"mkdir -p /mnt/fabrix && {MOUNT_CMD}",
         "when": "mnt.rc != 0"},
        _synchronize(c),
        {"name": "env dir", "ansible.builtin.file": {"path": os.path.dirname(c["env_file"]),
                                                     "state": "directory", "mode": "0755"}},
        {"name": "env file", "ansible.builtin.copy": {
            "src": str(d / "vllm.env"), "dest": c["env_file"], "mode": "0644"}},
    ]


def _synchronize(c: dict, mkpath: bool = False) -> dict:
    """`mkpath`: rsync makes the releases directory (as specfleet's rsync), so a converge from an empty
    worker works; the subset deploys converged after specfleet's, which had made it."""
    return {"name": "venv synced", "ansible.posix.synchronize": {
        "src": c["venv"] + "/", "dest": c["release"] + "/", "archive": True, "delete": True,
        "compress": False, "verify_host": True, "use_ssh_args": True, "ssh_connection_multiplexing": True,
        **({"rsync_opts": ["--mkpath"]} if mkpath else {})}}


def _ansible_same(d: Path, c: dict) -> list[dict]:
    """specfleet's 14 steps, in its order; each check a task that changes nothing, each fix under `when:`."""
    rel, venv, rels = c["release"], c["venv"], c["releases"]
    is_live = f"(live.stat.lnk_target | default('')) == {json.dumps(rel)}"
    mnt_fields = "(mnt.stdout.split() + ['', ''])"
    return [
        _quiet({"name": "base interpreter", "ansible.builtin.command": f"{q(c['base_python'])} -V",
                "register": "py"}, failed_when=f"py.rc != 0 or not py.stdout.startswith('Python {c['python_minor']}.')"),
        _synchronize(c, mkpath=True),
        {"name": "venv link (check)", "ansible.builtin.stat": {"path": venv, "get_checksum": False,
                                                             "get_mime": False, "get_attributes": False},
         "register": "live"},
        {"name": "previous release (record)", "ansible.builtin.copy": {
            "content": "{{ live.stat.lnk_target }}\n", "dest": f"{rels}/previous"},
         "when": f"(live.stat.islnk | default(false)) and not {is_live}"},
        {"name": "venv -> release", "ansible.builtin.file": {"src": rel, "dest": venv, "state": "link", "force": True},
         "when": f"not {is_live}"},
        {"name": "releases (list)", "ansible.builtin.find": {"paths": rels, "file_type": "directory"},
         "register": "rels"},
        _quiet({"name": "previous release (read)", "ansible.builtin.slurp": {"src": f"{rels}/previous"},
                "register": "prev"}, failed_when=False),
        {"name": "prune old releases", "ansible.builtin.file": {"path": "{{ item }}", "state": "absent"},
         "loop": "{{ old | product(['', '.verified']) | map('join') | list }}",
         "vars": {"old": "{{ rels.files | map(attribute='path') | reject('in', [" + json.dumps(rel)
                         + ", (prev.content | default('') | b64decode | trim)]) | list }}"}},
        {"name": "venv imports its packages here", "ansible.builtin.shell":
            f"{q(venv)}/bin/python -c {q(c['imports'])} && touch {q(rel + '.verified')}",
         "args": {"creates": rel + ".verified"}},
        {"name": "env dir", "ansible.builtin.file": {"path": os.path.dirname(c["env_file"]),
                                                     "state": "directory", "mode": "0755"}},
        {"name": "env file", "ansible.builtin.copy": {"src": str(d / "vllm.env"), "dest": c["env_file"],
                                                      "mode": "0644"}},
        {"name": "modules-load file", "ansible.builtin.copy": {
            "src": str(d / "modules.conf"), "dest": c["modules_file"], "mode": "0644"}},
        _quiet({"name": "GPU visible (check)", "ansible.builtin.command": GPU_QUERY, "register": "smi"},
               failed_when=False),
        _quiet({"name": "running kernel", "ansible.builtin.command": "uname -r", "register": "kernel",
                "when": "smi.rc != 0"}),
        _quiet({"name": "nvidia module's kernel", "ansible.builtin.shell":
                "modinfo -F vermagic nvidia 2>/dev/null | head -n1", "register": "vermagic", "when": "smi.rc != 0"}),
        {"name": "driver built for another kernel", "ansible.builtin.fail": {
            "msg": "the nvidia module is built for kernel {{ vermagic.stdout.split()[0] }}, "
                   "but {{ kernel.stdout }} is running"},
         "when": "smi.rc != 0 and (vermagic.stdout.split() | length > 0) and vermagic.stdout.split()[0] != kernel.stdout"},
        {"name": "driver loaded (modprobe)", "ansible.builtin.shell": _modprobe(c), "when": "smi.rc != 0"},
        _quiet({"name": "storage address", "ansible.builtin.command": f"ip -o -4 addr show dev {q(c['storage_iface'])}",
                "register": "addr"}, failed_when="(' ' + storage_ip + '/') not in addr.stdout"),
        _quiet({"name": "storage route (check)", "ansible.builtin.command":
                f"ip -o -4 route show exact {q(c['storage_net'])} table main", "register": "route"}),
        {"name": "storage route (fix)", "ansible.builtin.shell": _route_fix(c, "{{ storage_ip | quote }}"),
         "when": f"not ('dev {c['storage_iface']}' in route.stdout and "
                 "(' src ' not in route.stdout or (' src ' + storage_ip) in route.stdout))"},
        {"name": "netplan (check)", "ansible.builtin.stat": {"path": "/etc/netplan", "get_checksum": False,
                                                           "get_mime": False, "get_attributes": False},
         "register": "netplan"},
        {"name": "netplan drop-in", "ansible.builtin.copy": {
            "src": str(d / "netplan-{{ inventory_hostname }}.yaml"), "dest": c["netplan_file"], "mode": "0600"},
         "when": "netplan.stat.isdir | default(false)"},
        {"name": "fstab line", "ansible.builtin.lineinfile": {"path": "/etc/fstab", "line": c["fstab"]}},
        {"name": "mount point", "ansible.builtin.file": {"path": c["mount"], "state": "directory", "mode": "0755"}},
        _quiet({"name": "share mounted (check)", "ansible.builtin.command":
                f"findmnt -n -o SOURCE,OPTIONS --mountpoint {q(c['mount'])}", "register": "mnt"}, failed_when=False),
        {"name": "share mounted from elsewhere", "ansible.builtin.fail": {
            "msg": f"{c['mount']} is mounted from {{{{ {mnt_fields}[0] }}}}, not {c['source']}"},
         "when": f"mnt.rc == 0 and {mnt_fields}[0] != {json.dumps(c['source'])}"},
        {"name": "share mounted (mount)", "ansible.builtin.shell": c["mount_cmd"], "when": "mnt.rc != 0"},
        {"name": "share read-only (remount)", "ansible.builtin.command": f"mount -o remount,ro -- {q(c['mount'])}",
         "when": f"mnt.rc == 0 and 'ro' not in {mnt_fields}[1].split(',')"},
        _quiet({"name": "share readable", "ansible.builtin.command": c["readable"], "register": "readable"},
               failed_when="readable.rc != 0 or not readable.stdout"),
    ]


def write_ansible(work: Path, inv, c: dict, checks: str, collections: Path) -> Path:
    d = work / "ansible"
    d.mkdir(parents=True)
    CONTROL_DIR.mkdir(mode=0o700, exist_ok=True)
    hosts = inv.select("workers")
    h0 = hosts[0]
    lines = ["[workers]"]
    for h in hosts:
        line = f"{h.name} ansible_host={h.address} storage_ip={h.var('storage_ip')}"
        if checks == "same":
            (d / f"netplan-{h.name}.yaml").write_text(c["netplan"][h.name])
        lines.append(line)
    lines += ["", "[workers:vars]", "ansible_user=root", f"ansible_ssh_private_key_file={h0.key}",
              "ansible_python_interpreter=/usr/bin/python3"]
    (d / "hosts.ini").write_text("\n".join(lines) + "\n")
    # as written: Ansible reads ansible.cfg without interpolation, so a doubled %% reached ssh as a literal
    # "%C" -- one ControlPath for every host, every connection multiplexed onto the first host's master
    # (8 rsyncs into one worker's release: the rename failures, rc 23, and Ansible's figures measured one host)
    ssh_args = " ".join(ssh_opts(h0, CONTROL_DIR))
    (d / "ansible.cfg").write_text(textwrap.dedent(f"""\
        [defaults]
        forks = {len(hosts)}
        host_key_checking = True
        inventory = {d / 'hosts.ini'}
        collections_path = {collections}
        retry_files_enabled = False
        [ssh_connection]
        ssh_args = {ssh_args}
        """))
    (d / "modules.conf").write_text(c["modules"])
    (d / "vllm.env").write_text(c["env"])
    tasks = _ansible_same(d, c) if checks == "same" else _ansible_subset(d, c)
    for tuned in (False, True):
        play = [{"name": "no-op provision", "hosts": "workers", "gather_facts": not tuned, "tasks": tasks}]
        (d / f"play-{'tuned' if tuned else 'default'}.yml").write_text(json.dumps(play, indent=1))
    return d


# ---- pyinfra ------------------------------------------------------------------------------
_RSYNC_OP = """\
@operation()
def venv_rsync(src, dest):
    # files.rsync always runs; like specfleet, ask `rsync -n -i` first (same ssh options)
    argv = ["rsync", "-a", "--delete", "-n", "-i", "-e", CHECK_SSH, src,
            f"{host.data.ssh_user}@{host.name}:{dest}"]
    p = subprocess.run(argv, capture_output=True, text=True)
    items = [ln for ln in p.stdout.splitlines() if ln.strip() and not ln.startswith(".d..t...... ./")]
    if p.returncode != 0 or items:
        yield RsyncCommand(src, dest, ["-a", "--delete", "--mkpath"])  # --mkpath: the releases dir, as specfleet
    else:
        host.noop("venv up to date")
"""

# specfleet's 14 steps, in its order: a fact each check, an operation only where a fact says so
_PYINFRA_SAME = """\
def fail(name, message):
    python.raise_exception(RuntimeError, message, name=name)


ver = host.get_fact(Command, f"{C['base_python_q']} -V 2>&1 || true") or ""
if not ver.startswith(f"Python {C['python_minor']}."):
    fail("base interpreter", f"{C['base_python']} is {ver!r} here; the venv needs Python {C['python_minor']}")
venv_rsync(name="venv synced", src=C["venv"] + "/", dest=C["release"] + "/")
live = host.get_fact(Link, path=C["venv"])
if live and live["link_target"] != C["release"]:
    files.put(name="previous release (record)", src=io.StringIO(live["link_target"] + "\\n"),
              dest=C["releases"] + "/previous")
files.link(name="venv -> release", path=C["venv"], target=C["release"])
previous = "\\n".join(host.get_fact(FileContents, path=C["releases"] + "/previous") or []).strip()
for old in host.get_fact(FindDirectories, path=C["releases"], maxdepth=1):
    if old not in (C["releases"], C["release"], previous):
        files.directory(name=f"prune {old}", path=old, present=False)
        files.file(name=f"prune {old}.verified", path=old + ".verified", present=False)
if not host.get_fact(File, path=C["release"] + ".verified"):
    server.shell(name="venv imports its packages here", commands=[C["import_check"]])
files.directory(name="env dir", path=C["env_dir"], mode="755")
files.put(name="env file", src=io.StringIO(C["env"]), dest=C["env_file"], mode="644")
files.put(name="modules-load file", src=io.StringIO(C["modules"]), dest=C["modules_file"], mode="644")
if host.get_fact(Command, C["gpu_check"]) != "visible":
    kernel = host.get_fact(Kernel)
    vermagic = (host.get_fact(Command, "modinfo -F vermagic nvidia 2>/dev/null | head -n1; true") or "").split()
    if vermagic and vermagic[0] != kernel:
        fail("driver loaded", f"the nvidia module is built for kernel {vermagic[0]}, but {kernel} is running")
    else:
        server.shell(name="driver loaded (modprobe)", commands=[C["modprobe"]])
addresses = host.get_fact(Command, C["address_check"]) or ""
if f" {host.data.storage_ip}/" not in addresses:
    fail("storage address", f"{host.data.storage_ip} is not an address of {C['storage_iface']}")
route = host.get_fact(Command, C["route_check"]) or ""
if not (f"dev {C['storage_iface']}" in route and (" src " not in route or f" src {host.data.storage_ip}" in route)):
    server.shell(name="storage route (fix)", commands=[host.data.route_fix])
if host.get_fact(Directory, path="/etc/netplan"):
    files.put(name="netplan drop-in", src=io.StringIO(host.data.netplan), dest=C["netplan_file"], mode="600")
files.line(name="fstab line", path="/etc/fstab", line=f"^{C['fstab']}$", ensure_newline=True)
files.directory(name="mount point", path=C["mount"], mode="755")
mounted = (host.get_fact(Command, C["mount_check"]) or "").split()
if not mounted:  # the share is checked readable in the same command, after the mount
    server.shell(name="share mounted (mount)", commands=[C["mount_cmd"] + " && [ -n \\"$(" + C["readable"] + ")\\" ]"])
else:
    if mounted[0] != C["source"]:
        fail("share mounted", f"{C['mount']} is mounted from {mounted[0]}, not {C['source']}")
    elif "ro" not in (mounted[1].split(",") if len(mounted) > 1 else []):
        server.shell(name="share read-only (remount)", commands=[C["remount"]])
    if not host.get_fact(Command, C["readable"] + " || true"):
        fail("share readable", f"nothing readable under {C['mount']}")
"""


def write_pyinfra(work: Path, inv, c: dict, checks: str) -> Path:
    d = work / "pyinfra"
    d.mkdir(parents=True)
    hosts = inv.select("workers")
    data = []
    for h in hosts:
        hd = {"ssh_user": h.user, "ssh_key": h.key, "ssh_known_hosts_file": h.known_hosts,
              "ssh_strict_host_key_checking": "yes", "storage_ip": h.var("storage_ip")}
        if checks == "same":
            hd.update(netplan=c["netplan"][h.name], route_fix=_route_fix(c, q(h.var("storage_ip"))))
        data.append((h.address, hd))
    (d / "inventory.py").write_text(f"workers = {data!r}\n")
    check_ssh = shlex.join(["ssh", "-i", hosts[0].key, *ssh_opts(hosts[0], None)])
    if checks == "subset":
        (d / "deploy.py").write_text(_pyinfra_subset(c, check_ssh))
        return d
    consts = {k: c[k] for k in ("base_python", "python_minor", "venv", "release", "releases", "env", "env_file",
                                "modules", "modules_file", "storage_iface", "netplan_file", "fstab", "mount",
                                "source", "mount_cmd", "readable")}
    consts.update(
        base_python_q=q(c["base_python"]), env_dir=os.path.dirname(c["env_file"]),
        import_check=f"{q(c['venv'])}/bin/python -c {q(c['imports'])} && touch {q(c['release'] + '.verified')}",
        gpu_check=f"{GPU_QUERY} >/dev/null 2>&1 && echo visible || echo hidden", modprobe=_modprobe(c),
        address_check=f"ip -o -4 addr show dev {q(c['storage_iface'])} 2>/dev/null || true",
        route_check=f"ip -o -4 route show exact {q(c['storage_net'])} table main",
        mount_check=f"findmnt -n -o SOURCE,OPTIONS --mountpoint {q(c['mount'])} || true",
        remount=f"mount -o remount,ro -- {q(c['mount'])}")
    head = textwrap.dedent("""\
        import io, subprocess
        from pyinfra import host
        from pyinfra.api import operation
        from pyinfra.api.command import RsyncCommand
        from pyinfra.facts.files import Directory, File, FileContents, FindDirectories, Link
        from pyinfra.facts.server import Command, Kernel
        from pyinfra.operations import files, python, server

        """)
    (d / "deploy.py").write_text(head + f"C = {consts!r}\nCHECK_SSH = {check_ssh!r}\n\n\n"
                                 + _RSYNC_OP + "\n\n" + _PYINFRA_SAME)
    return d


def _pyinfra_subset(c: dict, check_ssh: str) -> str:
    return textwrap.dedent(f"""\
        import io, subprocess
        from pyinfra import host
        from pyinfra.api import operation
        from pyinfra.api.command import RsyncCommand
        from pyinfra.facts.server import Command
        from pyinfra.operations import files, server

        MODULES, ENV = {c['modules']!r}, {c['env']!r}
        SRC, DEST = {c['venv'] + '/'!r}, {c['release'] + '/'!r}

        @operation()
        def venv_rsync(src, dest):
            # files.rsync always runs; like specfleet, ask `rsync -n -i` first (same ssh options)
            argv = ["rsync", "-a", "--delete", "-n", "-i", "-e", {check_ssh!r}, src,
                    f"{{host.data.ssh_user}}@{{host.name}}:{{dest}}"]
            p = subprocess.run(argv, capture_output=True, text=True)
            items = [ln for ln in p.stdout.splitlines() if ln.strip() and not ln.startswith(".d..t...... ./")]
            if p.returncode != 0 or items:
                yield RsyncCommand(src, dest, ["-a", "--delete"])
            else:
                host.noop("venv up to date")

        files.put(name="modules-load file", src=io.StringIO(MODULES), dest={c['modules_file']!r}, mode="644")
        route = host.get_fact(Command, "ip -o -4 route show exact 192.168.160.0/24") or ""
        if "dev ens35" not in route:
            server.shell(name="storage route (fix)", commands=[
                "ip route del 192.168.160.0/24 2>/dev/null; "
                f"ip route add 192.168.160.0/24 dev ens35 scope link src {{host.data.storage_ip}}"])
        mounted = host.get_fact(Command, "findmnt -n --mountpoint /mnt/fabrix || true") or ""
        if not mounted.strip():
            server.shell(name="share mounted (mount)", commands=["mkdir -p /mnt/fabrix && {MOUNT_CMD}"])
        venv_rsync(name="venv synced", src=SRC, dest=DEST)
        files.directory(name="env dir", path={os.path.dirname(c['env_file'])!r}, mode="755")
        files.put(name="env file", src=io.StringIO(ENV), dest={c['env_file']!r}, mode="644")
        """)
