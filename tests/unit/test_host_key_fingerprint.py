"""A changed host key is named by its SHA256 fingerprint, as `ssh-keygen -l` prints it (issue 28: the
message showed paramiko's MD5 hex, which no OpenSSH tool prints any more)."""
import base64
import shutil
import subprocess

import paramiko
import pytest

from specfleet.connection import fingerprint


@pytest.mark.skipif(not shutil.which("ssh-keygen"), reason="needs ssh-keygen")
@pytest.mark.parametrize("kind", ["ed25519", "rsa", "ecdsa"])
def test_fingerprint_is_what_ssh_keygen_prints(tmp_path, kind):
    key = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(key)], check=True)
    keytype, blob = key.with_suffix(".pub").read_text().split()[:2]
    pkey = paramiko.PKey.from_type_string(keytype, base64.b64decode(blob))
    want = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(key.with_suffix(".pub"))],
                          capture_output=True, text=True, check=True).stdout.split()[1]
    assert fingerprint(pkey) == want and want.startswith("SHA256:")
