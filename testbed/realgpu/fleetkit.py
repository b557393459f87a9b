#!/usr/bin/env python3
"""Build, on a machine with PyPI and Debian's archive, what the product path on the device carries.

    .venv/bin/python -m testbed.realgpu.fleetkit [--out .realgpu/fleet]

OUT (ignored by git) gets: `wheels/` (the controller's packages the device image lacks: Fabric,
paramiko, invoke, pydantic and their compiled dependencies, cp312, CONTROLLER_WHEELS), `debs/`
(OpenSSH's server and client and rsync with the libraries they link, DEBS: `apt-get download`,
unpacked there with `dpkg-deb -x` into /tmp/sfssh, never into /), `snapshot.tar.gz` (this checkout's
specfleet, fabfile, plans, testbed and sample dataset as they are now, with SNAPSHOT naming the
commit), `fleet.sh` and MANIFEST.sha256 (fleet.sh checks it). About 18 MiB: it travels in a call of
its own, after `device.sh prepare` (docs/engines-gpu.md "The product path on the H200").
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from testbed.realgpu.devices import MIB, PROFILES  # noqa: E402
from testbed.realgpu.payload import platform_args, write_manifest  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: What specfleet's controller needs that the image lacks (KINDS.md's package list), as installed here.
CONTROLLER_WHEELS = (
    "fabric==3.2.3", "invoke==2.2.1", "paramiko==5.1.0", "bcrypt==5.0.0", "cryptography==50.0.2",
    "pynacl==1.6.2", "cffi==2.1.1", "pycparser==3.12", "decorator==5.3.1", "deprecated==1.3.1",
    "tenacity==9.2.1", "pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0",
    "typing-inspection==0.4.5", "typing-extensions==4.16.0",
    # the versions specfleet's tests run with, over the image's own (whose versions are not checked)
    "pandas==3.1.1", "tzdata==2026.6", "rich==15.0.0", "markdown-it-py==4.3.0", "mdurl==0.1.2", "pygments==2.21.0",
)
#: sshd, ssh, ssh-keygen and rsync from Debian 12, with every library they link that a bare image may
#: lack (the wrappers put only these binaries on LD_LIBRARY_PATH).
DEBS = (
    "openssh-server", "openssh-client", "rsync", "libwrap0", "libpopt0", "libxxhash0", "liblz4-1", "libzstd1",
    "libacl1", "libgssapi-krb5-2", "libkrb5-3", "libk5crypto3", "libkrb5support0", "libkeyutils1", "libcom-err2",
    "libfido2-1", "libcbor0.8", "libedit2", "libbsd0", "libmd0", "libaudit1", "libcap-ng0", "libselinux1",
    "libpcre2-8-0", "libcrypt1", "libsystemd0", "libssl3", "zlib1g", "libtinfo6", "libudev1", "libpam0g",
    "libgcrypt20", "libgpg-error0", "liblzma5", "libcap2", "libnsl2", "libtirpc3", "libtirpc-common",
)
SNAPSHOT_PATHS = ("specfleet", "roles", "tasks", "templates", "testbed", "plans", "datasets/sample", "fabfile.py",
                  "pyproject.toml")


def log(msg: str) -> None:
    print(f"[fleetkit] {msg}", file=sys.stderr, flush=True)


def wheels(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    have = {p.name.split("-")[0].lower() for p in dest.glob("*.whl")}
    todo = [r for r in CONTROLLER_WHEELS if r.split("==")[0].replace("-", "_").lower() not in have]
    if todo:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        *platform_args(PROFILES["nvidia-h200"]), "-d", str(dest), *todo],
                       check=True, env={**os.environ, "PIP_CONSTRAINT": ""})


def debs(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    have = {p.name.split("_")[0] for p in dest.glob("*.deb")}
    todo = [d for d in DEBS if d not in have]
    if todo:
        subprocess.run(["apt-get", "download", *todo], cwd=dest, check=True)


def snapshot(dest: Path) -> str:
    """tar.gz of SNAPSHOT_PATHS as they are in the working tree (tracked and untracked-not-ignored)."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                            "--", *SNAPSHOT_PATHS], capture_output=True, check=True).stdout.split(b"\0")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", *SNAPSHOT_PATHS],
                           capture_output=True, text=True, check=True).stdout.strip()
    name = f"{head}{' + uncommitted changes' if dirty else ''}"
    with tarfile.open(dest, "w:gz") as tar:
        for rel in sorted(os.fsdecode(f) for f in files if f):
            p = REPO / rel
            inside = p.is_symlink() and p.resolve().is_relative_to(REPO)  # specfleet/roles -> ../roles
            if (inside or p.is_file() and not p.is_symlink()) and "__pycache__" not in rel:
                tar.add(p, arcname=rel, recursive=False)
        data = (name + "\n").encode()
        info = tarfile.TarInfo("SNAPSHOT")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name


def build(out: Path) -> Path:
    wheels(out / "wheels")
    debs(out / "debs")
    name = snapshot(out / "snapshot.tar.gz")
    for f in ("fleet.sh",):
        shutil.copy2(HERE / f, out / f)
    (out / "MANIFEST.sha256").unlink(missing_ok=True)
    write_manifest(out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    log(f"{out}: {size / MIB:.1f} MiB (snapshot {name})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / ".realgpu" / "fleet"))
    a = ap.parse_args(argv)
    print(build(Path(a.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
