"""One SSH connection per host, opened once and reused by every step.

A paramiko SSHClient, as Fabric's Connection wraps one, less Fabric's layer (its per-connection
config clone cost ~5 ms of CPU per host, and every no-op `fab provision` opens one per worker):
- host keys are checked against the inventory's known_hosts file (Fabric
  silently adds unknown keys; we refuse them, or add them only with an
  explicit accept-new), and a changed key is always refused;
- no ~/.ssh/config is read: the inventory is the single source of truth;
- TCP_NODELAY is set on the socket: without it each command on a warm
  connection waits ~40 ms for Nagle's algorithm (docs/concepts.md).
"""
from __future__ import annotations

import base64
import hashlib
import logging
import os
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import paramiko

from .inventory import Host
from .quoting import ssh_option

_known_hosts_lock = threading.Lock()
_cache_lock = threading.Lock()
_known_hosts_cache: dict[str, tuple[tuple, paramiko.HostKeys]] = {}


def _parsed_known_hosts(path: str) -> paramiko.HostKeys:
    """The known_hosts file parsed once per content version, shared by every connection.

    paramiko's HostKeys.load is quadratic in the number of lines (it looks each new line up
    among the lines before it, building a class per lookup), so loading the whole file for
    each of N hosts cost O(N^3): most of a cold 32-host run's client CPU.
    """
    st = os.stat(path)
    version = (st.st_ino, st.st_size, st.st_mtime_ns)
    with _cache_lock:
        hit = _known_hosts_cache.get(path)
        if hit and hit[0] == version:
            return hit[1]
    keys = paramiko.HostKeys(path)
    with _cache_lock:
        _known_hosts_cache[path] = (version, keys)
    return keys


class Unreachable(Exception):
    """The host could not be connected to (network, auth or host key)."""


class CommandTimeout(Exception):
    pass


class UnknownHostKey(paramiko.MissingHostKeyPolicy):
    """A key not in known_hosts is refused; with `record_to` (--accept-new-host-keys) it is recorded there,
    like OpenSSH's StrictHostKeyChecking=accept-new. A changed key never gets here (BadHostKeyException)."""

    def __init__(self, record_to: str | None = None):
        self.record_to = record_to

    def missing_host_key(self, client, hostname, key):
        if self.record_to is None:
            raise Unreachable(
                f"host key for {hostname} ({key.get_name()}) is not in the known_hosts file; "
                "verify it and add it (e.g. `ssh-keyscan -p PORT ADDRESS >> KNOWN_HOSTS`), "
                "or run once with --accept-new-host-keys to record it"
            )
        with _known_hosts_lock:
            Path(self.record_to).parent.mkdir(parents=True, exist_ok=True)
            with open(self.record_to, "a") as f:
                f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


@dataclass
class RunResult:
    stdout: str
    stderr: str
    exited: int
    duration: float


# paramiko's transport thread logs what it then raises (or what a closed connection makes it
# say); specfleet reports connection failures itself, one line per host
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def fingerprint(key: paramiko.PKey) -> str:
    """`SHA256:...` as ssh-keygen -l and OpenSSH's own messages print it (not paramiko's MD5 hex)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


class HostConnection:
    """A host and its one open SSH connection."""

    def __init__(self, host: Host, *, accept_new: bool = False):
        self.host = host
        # an inventory key means exactly that key; without one, do what ssh does (agent, ~/.ssh/id_*)
        self.connect_kwargs = {"hostname": host.address, "port": host.port, "username": host.user,
                               "timeout": max(1, int(host.connect_timeout)),
                               "look_for_keys": not host.key, "allow_agent": not host.key,
                               "banner_timeout": host.connect_timeout, "auth_timeout": host.connect_timeout,
                               "key_filename": host.key}
        self.client = client = paramiko.SSHClient()
        if Path(host.known_hosts).is_file():
            # only this host's entries, under the name paramiko checks ("[addr]:port" off port 22)
            name = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
            entry = _parsed_known_hosts(host.known_hosts).lookup(name)
            for keytype, key in (entry or {}).items():
                client.get_host_keys().add(name, keytype, key)
        client.set_missing_host_key_policy(UnknownHostKey(host.known_hosts if accept_new else None))
        self._lock = threading.Lock()  # one command at a time on this connection

    @property
    def transport(self) -> paramiko.Transport | None:
        return self.client.get_transport()

    def open(self) -> None:
        if self.transport and self.transport.active:
            return
        try:
            # our own socket, TCP_NODELAY before the key exchange: with Nagle on during
            # kex and auth, the handshake waits on delayed ACKs (~40 ms per connect)
            sock = socket.create_connection((self.host.address, self.host.port),
                                            timeout=max(1, int(self.host.connect_timeout)))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                self.client.connect(**self.connect_kwargs, sock=sock)
            except BaseException:
                # the transport's thread first, then its socket: the other way round the thread reads
                # a closed socket and paramiko prints "Socket exception: Bad file descriptor (9)"
                self.close()
                sock.close()
                raise
        except paramiko.BadHostKeyException as e:
            raise Unreachable(
                f"host key for {self.host.address} CHANGED (got {e.key.get_name()} {fingerprint(e.key)}, "
                f"known_hosts has {e.expected_key.get_name()} {fingerprint(e.expected_key)}); refusing to "
                f"connect. If the host was reinstalled, remove its old line from {self.host.known_hosts} "
                "after checking"
            ) from None
        except paramiko.AuthenticationException as e:
            raise Unreachable(f"authentication failed for {self.host.user}@{self.host.address}: {e}") from None
        except (OSError, paramiko.SSHException, EOFError) as e:
            raise Unreachable(f"cannot connect to {self.host.address}:{self.host.port}: {e}") from None
        self.transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport.set_keepalive(15)

    def run(self, command: str, *, timeout: float | None = None,
            stdin: bytes | Iterable[bytes] | None = None) -> RunResult:
        """Run a command on the open connection and capture its output.

        A raw session channel, not Fabric's Runner: the Runner's polling threads
        cost several ms per command, and steps issue many small commands.
        `stdin` (bytes, or chunks of any total size) is streamed to the command, then closed;
        the command text stays small whatever the payload (sshd and the kernel limit it).
        """
        self.open()
        timeout = timeout or self.host.command_timeout
        start = time.monotonic()
        with self._lock:
            try:
                chan = self.transport.open_session(timeout=self.host.connect_timeout)
            except (paramiko.SSHException, EOFError) as e:
                # "Timeout opening channel." on a loaded host, a channel refused: the connection is
                # lost for this command, as a failed connect is (a caller that polls reads again)
                self.close()
                raise Unreachable(f"connection to {self.host.address}:{self.host.port} lost: "
                                  f"no channel opened ({e or type(e).__name__})") from None
            try:
                chan.settimeout(timeout)
                chan.exec_command(command)
                if stdin is not None:
                    _send(chan, [stdin] if isinstance(stdin, bytes) else stdin, start + timeout)
                if not chan.closed:
                    chan.shutdown_write()
                out, err = _drain(chan, start + timeout)
                code = chan.recv_exit_status()
            except socket.timeout:
                raise CommandTimeout(f"command timed out after {timeout:.0f} s") from None
            except (paramiko.SSHException, EOFError) as e:  # the channel closed under the command
                self.close()
                raise Unreachable(f"connection to {self.host.address}:{self.host.port} lost: {e or type(e).__name__}"
                                  ) from None
            finally:
                chan.close()
        return RunResult(out.decode(errors="replace"), err.decode(errors="replace"), code,
                         time.monotonic() - start)

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # closing a broken transport must never mask the real error
            pass


def _send(chan: paramiko.Channel, chunks: Iterable[bytes], deadline: float) -> None:
    """Send chunks until done or the command stops reading (it exited: its stderr says why)."""
    for chunk in chunks:
        if time.monotonic() > deadline:
            raise socket.timeout()
        if chan.exit_status_ready() or chan.closed:
            return
        try:
            chan.sendall(chunk)
        except socket.timeout:
            raise
        except OSError:  # the channel was closed under us: the exit status and stderr tell the rest
            return


def _drain(chan: paramiko.Channel, deadline: float) -> tuple[bytes, bytes]:
    """Read stdout to its end, then stderr (paramiko buffers stderr meanwhile)."""
    out, err = bytearray(), bytearray()
    for recv, buf in ((chan.recv, out), (chan.recv_stderr, err)):
        while True:
            if time.monotonic() > deadline:
                raise socket.timeout()
            chunk = recv(65536)  # blocks until data, EOF (b"") or the channel timeout
            if not chunk:
                break
            buf += chunk
    return bytes(out), bytes(err)


def ssh_argv(host: Host, *, control_dir: str | None = None) -> list[str]:
    """OpenSSH options for tools that bring their own ssh (rsync): same key, same known_hosts.

    No user ssh_config is read (-F /dev/null) and unknown or changed host keys
    are refused, as for specfleet's own connections. A control master lets
    several rsync calls to one host share a connection; its socket lives in the
    temporary folder (TMPDIR, else /tmp), so two controllers that reach different
    machines at the same user@address:port (two testbeds in their own network
    namespaces) can keep their sockets apart.
    """
    # paths go through ssh_option: OpenSSH splits -o values on spaces and expands % tokens
    control_dir = control_dir or tempfile.gettempdir()
    control = ssh_option("ControlPath", f"{control_dir}/specfleet-ssh-", tokens="%C")
    argv = ["ssh", "-F", "/dev/null", "-p", str(host.port), "-l", host.user,
            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", ssh_option("UserKnownHostsFile", host.known_hosts), "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", f"ConnectTimeout={max(1, int(host.connect_timeout))}",
            "-o", "ControlMaster=auto", "-o", control,
            "-o", "ControlPersist=60", "-o", "LogLevel=ERROR"]
    if host.key:
        argv += ["-o", ssh_option("IdentityFile", host.key), "-o", "IdentitiesOnly=yes"]
    return argv
