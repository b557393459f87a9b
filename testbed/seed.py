"""Files the testbed writes before any host boots: keys, sshd and client
configs, each worker's on-disk private trees, the NFS export and the inventory."""
from __future__ import annotations

import json
import os
import shutil
import stat
import uuid
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization as ser
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from .net import BASTION_IP, NFS_IP, STOR_NET, mgmt_ip, stor_ip

PROJECT_ROOT = Path(__file__).resolve().parent.parent

HOST_SRC = Path(__file__).with_name("host")
NFS_EXPORT = "/media/SSD-Storage/SW"
NFS_MOUNT = "/mnt/fabrix"
# Stand-ins put into each worker's private /usr/sbin: file name -> source file.
STANDINS = {
    "mount.nfs4": "mount.nfs4", "netplan": "netplan",
    "modprobe": "gpu-standin", "lsmod": "gpu-standin",
}
# The login the inventory uses, as on the field report's cluster (maymust@10.10.30.14): an ordinary user
# with passwordless sudo on every worker. LOGINS: the choices of `Testbed.up(login=...)`.
LOGIN = "maymust"
LOGINS = (LOGIN, "root")
LOGIN_UID = 2037  # or the next uid the machine's /etc/passwd leaves free (login_ids)
GPU = {  # what one simulated GPU says about itself (an sm_120 card, as in the field)
    "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "memory_total_mib": 97887, "driver_version": "575.57.08", "cuda_version": "12.9",
}


def write(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(text.encode() if isinstance(text, str) else text)
    os.chmod(path, mode)  # O_CREAT's mode is filtered by the umask


def keypair(path: Path, comment: str) -> str:
    """An ed25519 key in OpenSSH format (in-process: ssh-keygen costs a fork per host)."""
    key = Ed25519PrivateKey.generate()
    write(path, key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.OpenSSH,
                                  ser.NoEncryption()), 0o600)
    pub = key.public_key().public_bytes(ser.Encoding.OpenSSH, ser.PublicFormat.OpenSSH).decode()
    write(path.with_suffix(".pub"), f"{pub} {comment}\n")
    return pub


def client_files(run_dir: Path, login: str = LOGIN) -> None:
    client = run_dir / "client"
    pub = keypair(client / "id_ed25519", "specfleet-testbed-client")
    write(run_dir / "authorized_keys", pub + "\n", 0o600)
    write(client / "known_hosts", "", 0o644)
    write(client / "ssh_config", f"""\
# OpenSSH client settings for the testbed: ssh -F {client}/ssh_config 10.10.30.14
Host 10.10.30.*
  User {login}
  IdentityFile {client}/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile {client}/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
  LogLevel ERROR
""")


def sshd_files(run_dir: Path, name: str, i: int) -> str:
    """Host key + sshd_config for worker I; returns its known_hosts line."""
    d = run_dir / "hosts" / name
    pub = keypair(d / "ssh_host_ed25519_key", f"sf-{name}")
    write(d / "sshd_config", f"""\
# sshd of testbed worker {name}; runs inside namespace sf-{name}
ListenAddress {mgmt_ip(i)}:22
HostKey {d}/ssh_host_ed25519_key
PidFile {d}/sshd.pid
AuthorizedKeysFile {run_dir}/authorized_keys .ssh/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
PrintLastLog no
# the fleet runner opens many sessions at once; keep sshd from dropping them
MaxStartups 200:30:400
MaxSessions 64
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
""")
    return f"{mgmt_ip(i)} {pub}\n"


def netplan_yaml(i: int, extra_stor: list[str] | None = None, only: str | None = None) -> str:
    ifs = {"ens33": [f"{mgmt_ip(i)}/24"], "ens35": [f"{stor_ip(i)}/24", *(extra_stor or [])]}
    lines = ["# written by the specfleet testbed", "network:", "  version: 2",
             "  renderer: networkd", "  ethernets:"]
    for ifname, addrs in ifs.items():
        if only and ifname != only:
            continue
        lines += [f"    {ifname}:", "      dhcp4: false", "      addresses:"]
        lines += [f"        - {a}" for a in addrs]
    return "\n".join(lines) + "\n"


# The part of /etc that a worker boots from and the roles manage is the
# worker's own, seeded as on a freshly installed Debian 12 worker: the
# controller's own files under those names never show through the overlay.
# (A stock Debian 12 without kmod has modules-load.d/modules.conf -> ../modules
# dangling; whether a worker boots must not depend on the machine running it.)
OWN_ETC_DIRS = ("modules-load.d", "netplan")
ABSENT_ETC = ("specfleet",)  # what a fresh worker does not have yet
DEBIAN_MODULES = ("# /etc/modules: kernel modules to load at boot time.\n#\n"
                  "# This file contains the names of kernel modules that should be loaded\n"
                  "# at boot time, one per line. Lines beginning with \"#\" are ignored.\n"
                  "# Parameters can be specified after the module name.\n\n")
DEBIAN_FSTAB = ("# /etc/fstab: static file system information.\n#\n"
                "# <file system> <mount point>   <type>  <options>       <dump>  <pass>\n"
                "/dev/vda1       /               ext4    errors=remount-ro 0       1\n")


def opaque_dir(path: Path) -> None:
    """An overlay upper directory that hides the lower one's entries (overlayfs(5))."""
    path.mkdir(parents=True, exist_ok=True)
    os.setxattr(path, "trusted.overlay.opaque", b"y")


def whiteout(path: Path) -> None:
    """An overlay upper entry that hides the lower one's file of that name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(0, 0))


def own_etc(etc: Path, name: str, i: int, kmod: bool) -> None:
    """Seed the worker's own /etc entries (an overlay upper) like a fresh install.

    `kmod=False` is a stock image without kmod: /etc/modules is absent, so
    systemd's modules-load.d/modules.conf link dangles, as on such a machine.
    """
    for d in OWN_ETC_DIRS:
        opaque_dir(etc / d)
    os.chmod(etc / "netplan", 0o755)
    os.symlink("../modules", etc / "modules-load.d" / "modules.conf")  # shipped by systemd
    if kmod:
        write(etc / "modules", DEBIAN_MODULES)
    else:
        whiteout(etc / "modules")
    write(etc / "fstab", DEBIAN_FSTAB)
    # the kernel's hostname is sf-<name> (host-init): sudo resolves it, and warns on every call when it cannot
    write(etc / "hosts", f"127.0.0.1\tlocalhost\n127.0.1.1\tsf-{name} {name}\n"
                         f"{mgmt_ip(i)}\t{name}\n")
    write(etc / "hostname", f"{name}\n")
    write(etc / "netplan" / "50-testbed.yaml", netplan_yaml(i), 0o600)
    for n in ABSENT_ETC:
        whiteout(etc / n)


def login_ids(passwd: str, group: str) -> int:
    """A uid (and gid of the same number) that the machine's passwd and group files leave free: the
    worker's files are the machine's plus the login user, so its ids must not be any of the machine's."""
    def used(text: str) -> set[int]:
        return {int(f[2]) for f in (ln.split(":") for ln in text.splitlines()) if len(f) > 2 and f[2].isdigit()}
    taken = used(passwd) | used(group)
    uid = LOGIN_UID
    while uid in taken:
        uid += 1
    return uid


def login_user(etc: Path, home: Path, run_dir: Path) -> None:
    """The ordinary login user with NOPASSWD sudo, in the worker's own /etc (an overlay upper: the
    machine's passwd, group and shadow plus this user) and its own /home (bound by host-init).
    The testbed's client key authorizes it in ~/.ssh (sshd reads that file as the user)."""
    passwd, group = Path("/etc/passwd").read_text(), Path("/etc/group").read_text()
    uid = login_ids(passwd, group)
    write(etc / "passwd", passwd.rstrip("\n") + f"\n{LOGIN}:x:{uid}:{uid}::/home/{LOGIN}:/bin/bash\n")
    write(etc / "group", group.rstrip("\n") + f"\n{LOGIN}:x:{uid}:\n")
    shadow = Path("/etc/shadow").read_text() if Path("/etc/shadow").is_file() else ""
    # '*': no password can log in, and the account is not locked ('!' would refuse the key too)
    write(etc / "shadow", shadow.rstrip("\n") + (shadow and "\n") + f"{LOGIN}:*:20000:0:99999:7:::\n", 0o640)
    os.chown(etc / "shadow", 0, _gid("shadow"))
    write(etc / "sudoers.d" / LOGIN, f"{LOGIN} ALL=(ALL) NOPASSWD:ALL\n", 0o440)
    user_home = home / LOGIN
    shutil.copytree("/etc/skel", user_home, dirs_exist_ok=True, symlinks=True)
    write(user_home / ".ssh" / "authorized_keys", (run_dir / "authorized_keys").read_text(), 0o600)
    for path in (user_home, user_home / ".ssh", *user_home.rglob("*")):
        os.lchown(path, uid, uid)
    os.chmod(user_home, 0o750)
    os.chmod(user_home / ".ssh", 0o700)


def _gid(name: str) -> int:
    import grp
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return 0


def gpu_json(name: str, gpus: int) -> dict:
    """Worker `name`'s GPUs (docs/dev/contracts.md): G identical cards with their own index,
    UUID and PCI bus id; GPU 0's UUID is the one a single-GPU worker always had."""
    def uid(k: int) -> str:
        tag = f"{name}.specfleet-testbed" if k == 0 else f"{name}.gpu{k}.specfleet-testbed"
        return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, tag)}"
    shared = {key: GPU[key] for key in ("driver_version", "cuda_version")}
    cards = [{"index": k, "uuid": uid(k), "name": GPU["name"], "memory_total_mib": GPU["memory_total_mib"],
              "pci_bus_id": "00000000:01:00.0" if gpus == 1 else f"00000000:{0x18 + 0x10 * k:02X}:00.0"}
             for k in range(gpus)]
    return {**shared, "link": "NV18", "gpus": cards}  # an HGX-like node: NVLink between all pairs


def host_disk(disk: Path, run_dir: Path, name: str, i: int, speed: float,
              kmod: bool = True, gpus: int = 1) -> None:
    """Seed worker I's on-disk private trees (overlay uppers and bind sources)."""
    h = disk / "hosts" / name
    for sub in ("opt", "mnt", "root", "home", *(f"ovl/{o}/{d}" for o in ("_etc", "_var_lib", "_usr_sbin", "_usr_bin")
                                         for d in ("upper", "work"))):
        (h / sub).mkdir(parents=True, exist_ok=True)
    # private /root with Debian's skeleton dotfiles: the bastion's .bashrc runs
    # `pyenv init` (~120 ms) on every ssh exec
    shutil.copytree("/etc/skel", h / "root", dirs_exist_ok=True, symlinks=True)
    os.chmod(h / "root", 0o700)
    own_etc(h / "ovl" / "_etc" / "upper", name, i, kmod)
    login_user(h / "ovl" / "_etc" / "upper", h / "home", run_dir)
    state = h / "ovl" / "_var_lib" / "upper" / "specfleet-testbed"
    write(state / "sim.json", json.dumps({"speed_factor": speed, "noise": 0.0, "fault": None}) + "\n")
    # the simulated engine counts its server starts here (simenv.start_noise_seed), as whatever user runs it
    write(state / "noise-starts", "", 0o666)
    write(state / "host.json", json.dumps({
        "name": name, "export_root": str(disk / "export"), "storage_net": str(STOR_NET),
        "nfs_server": NFS_IP, "run_dir": str(run_dir)}, indent=1) + "\n")
    write(state / "gpu" / "gpu.json", json.dumps(gpu_json(name, gpus), indent=1) + "\n")
    (state / "gpu" / "reservations").mkdir(parents=True, exist_ok=True)
    # any user's server holds GPU memory, as any user may open /dev/nvidia* (0666 on a driver install)
    os.chmod(state / "gpu" / "reservations", 0o1777)
    sbin = h / "ovl" / "_usr_sbin" / "upper"
    sbin.mkdir(parents=True, exist_ok=True)
    for dst, src in STANDINS.items():
        shutil.copyfile(HOST_SRC / src, sbin / dst)
        os.chmod(sbin / dst, 0o755)
    os.symlink("mount.nfs4", sbin / "mount.nfs")
    # nvidia-smi lives in /usr/bin, as the driver package puts it: on every user's PATH
    ubin = h / "ovl" / "_usr_bin" / "upper"
    shutil.copyfile(HOST_SRC / "gpu-standin", ubin / "nvidia-smi")
    os.chmod(ubin / "nvidia-smi", 0o755)


def export_tree(disk: Path) -> Path:
    """The storage server's export with a small simulated model (placeholders, not weights)."""
    root = disk / "export" / NFS_EXPORT.lstrip("/")
    m = root / "models" / "Qwen3-32B"
    cfg = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 5120,
        "intermediate_size": 25600, "num_hidden_layers": 64, "num_attention_heads": 64,
        "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
        "vocab_size": 151936, "torch_dtype": "bfloat16", "rope_theta": 1000000,
        "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "transformers_version": "4.51.0",
        "simvllm": {"weights_gib": 61.03, "simulated": True},
    }
    write(m / "config.json", json.dumps(cfg, indent=2) + "\n")
    write(m / "tokenizer_config.json", json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "model_max_length": 131072,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "simulated": True}, indent=2) + "\n")
    for k in range(1, 4):  # a few tiny placeholders; the real checkpoint has 17 shards
        write(m / f"model-{k:05d}-of-00017.safetensors", b"SIMULATED placeholder shard\n")
    spec = root / "models" / "Qwen3-32B-speculator.eagle3"
    write(spec / "config.json", json.dumps(eagle3_speculator(cfg, "Qwen/Qwen3-32B"), indent=2) + "\n")
    write(root / "README", f"exported by sf-nfs ({NFS_IP}:{NFS_EXPORT}); simulated model files\n")
    return root


def eagle3_speculator(target: dict, verifier: str, k: int = 3) -> dict:
    """An EAGLE-3 drafter's config.json in the speculators layout (vllm-project/speculators
    `Eagle3SpeculatorConfig`, as RedHatAI/Qwen3-32B-speculator.eagle3 publishes it): a 1-layer Llama
    draft of the target's width and vocabulary, trained for `verifier`, proposing k tokens."""
    layers = target["num_hidden_layers"]
    layer = {k_: target[k_] for k_ in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                                       "head_dim", "max_position_embeddings", "vocab_size", "rms_norm_eps", "rope_theta")}
    return {
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.1.0.dev13",
        "transformer_layer_config": {**layer, "model_type": "llama", "architectures": ["LlamaForCausalLM"],
                                     "num_hidden_layers": 1, "hidden_act": "silu", "torch_dtype": "bfloat16"},
        "draft_vocab_size": 32000, "target_hidden_size": None, "norm_before_residual": False,
        "eagle_aux_hidden_state_layer_ids": [2, layers // 2, layers - 3], "torch_dtype": "bfloat16",
        "speculators_config": {
            "algorithm": "eagle3", "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": k, "verifier_accept_k": 1,
                                  "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": verifier, "architectures": list(target["architectures"])}},
        "simvllm": {"weights_gib": 1.44, "simulated": True}}


def inventory(path: Path, run_dir: Path, workers: list[str], scheduler: dict | None = None,
              login: str = LOGIN) -> Path:
    client = run_dir / "client"
    doc = {
        "all": {
            # a non-root login escalates with `sudo -n` where a step needs root (become)
            "user": login, **({"become": True} if login != "root" else {}), "key": str(client / "id_ed25519"),
            "known_hosts": str(client / "known_hosts"), "connect_timeout": 5,
            "vars": {
                "venv_path": "/opt/vllm-venv", "base_python": "/usr/bin/python3.11",
                "storage_net": str(STOR_NET), "storage_iface": "ens35", "mgmt_iface": "ens33",
                "nfs_server": NFS_IP, "nfs_export": NFS_EXPORT, "nfs_mount": NFS_MOUNT,
                "model_candidates": ["/mnt/Qwen3-32B", f"{NFS_MOUNT}/models/Qwen3-32B"],
                "gpu_index": 0, "testbed": True, "env_file": "/etc/specfleet/vllm.env",
                "gpu_memory_bandwidth_gbps": 1792, "engine": "simulated",
            },
        },
        # the bastion builds the workers' venv with the simulated engine in it
        # (docs/engines.md), and provision places the sample dataset on workers
        "bastion": {"vars": {
            "address": BASTION_IP,
            "venv_requirements": [str(PROJECT_ROOT / "testbed" / "simvllm")],
            "venv_verify_packages": ["vllm"],
            "datasets": [str(PROJECT_ROOT / "datasets" / "sample" / "question.jsonl")],
        }},
        "hosts": {n: {"address": mgmt_ip(int(n[1:])), "vars": {"storage_ip": stor_ip(int(n[1:]))}}
                  for n in workers},
        "groups": {"workers": {"hosts": list(workers)}},
    }
    if scheduler:  # `--scheduler slurm`: fab bench submits Slurm jobs (docs/slurm.md)
        doc["scheduler"] = scheduler
    head = (f"# Written by `fab testbed.up` ({len(workers)} namespace workers); "
            f"`fab testbed.down` makes it stale.\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    write(path, head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None))
    return path
