"""The one quoting layer (specfleet/quoting.py): each syntax read back by the program that parses it.

Shell text runs in the local bash/dash, fstab lines are read by findmnt (libmount), ssh options by
`ssh -G`, YAML by PyYAML: the same parsers a worker uses, not a re-implementation.
"""
import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from specfleet.roles import env, nfs
from specfleet.roles.model import ModelDir
from specfleet.worker.host import sourced_env
from specfleet.inventory import Host, declared_defaults
from specfleet.roles import vars_model
from specfleet.quoting import env_key, env_line, fstab_line, q, ssh_option, yaml_str
from specfleet.render import render
from specfleet.facts.gather import gather_here

PROJECT = Path(__file__).resolve().parents[2]

# Each of these must come back byte for byte, and none may run anything.
HOSTILE = [
    "$(touch CANARY)", "`touch CANARY`", "a; touch CANARY", "a && touch CANARY", "line1\nline2",
    "trailing newline\n", "it's \"quoted\"", "back\\slash\\", "$HOME ${PATH} $", "with  spaces\tand tab",
    "Grüße, 日本語 🚀", "-leading-dash", "", "'", '"', "\\", "!history", "*glob?[x]", "#not a comment",
    "a\\\nb", "${IFS}", "$'ansi'", "nel\x85 ls\u2028 bom\ufeff del\x7f",
]


def _host(**vars_):
    return Host("w1", "10.0.0.1", "root", 22, None, "/dev/null", True, 5, 5, (),
                {**declared_defaults(vars_model()), **vars_})  # as loaded: the declared defaults filled in


@pytest.mark.parametrize("shell", ["bash", "dash"])
def test_env_file_reads_back_byte_for_byte_when_sourced(tmp_path, shell, monkeypatch):
    if not shutil.which(shell):
        pytest.skip(f"{shell} not installed")
    extra = {f"V{i}": v for i, v in enumerate(HOSTILE)}
    lines = env.lines("/opt/my venv/$(touch CANARY)", "3.11", "nvidia/cu 13", "$(touch CANARY) gcc", extra)
    f = tmp_path / "vllm.env"
    f.write_text(render("provision/vllm.env.j2", lines=lines))
    names = ["CUDA_HOME", "CUDA_PATH", "PATH", "VIRTUAL_ENV", "CC", "TRITON_PTXAS_PATH", *extra]
    dump = "; ".join(f'printf "%s\\0" "${n}"' for n in names)
    p = subprocess.run([shell, "-c", f'PATH=/usr/bin:/bin; . "$1"; {dump}', "sh", str(f)],
                       cwd=tmp_path, capture_output=True)
    assert p.returncode == 0, p.stderr
    got = dict(zip(names, p.stdout.decode().split("\0")))
    cuda = "/opt/my venv/$(touch CANARY)/lib/python3.11/site-packages/nvidia/cu 13"
    assert got["CUDA_HOME"] == got["CUDA_PATH"] == cuda
    assert got["PATH"] == f"/opt/my venv/$(touch CANARY)/bin:{cuda}/bin:/usr/bin:/bin"
    assert got["VIRTUAL_ENV"] == "/opt/my venv/$(touch CANARY)" and got["CC"] == "$(touch CANARY) gcc"
    assert got["TRITON_PTXAS_PATH"] == f"{cuda}/bin/ptxas"
    for k, v in extra.items():
        assert got[k] == v, (k, v)
    # the runner sources the file with sh (set -a) from its run folder: the same values, no command run
    monkeypatch.chdir(tmp_path)
    parsed = sourced_env(str(f), {"PATH": "/usr/bin:/bin"})
    assert {k: parsed[k] for k in names} == got
    assert not list(tmp_path.glob("CANARY*")), "sourcing the env file ran a command"


def test_env_keys_must_be_identifiers():
    for bad in ["X=1; touch /tmp/pwned; Y", "1X", "A-B", "", "A B", "é"]:
        with pytest.raises(ValueError, match="shell variable name"):
            env_key(bad)
        with pytest.raises(ValueError):
            env.lines("/opt/v", "3.11", "nvidia/cu13", "gcc", {bad: "1"})
    assert env_line("_A1", "x y") == "export _A1='x y'"


def test_model_probe_treats_candidates_as_data(tmp_path):
    good = tmp_path / "models" / "m"
    good.mkdir(parents=True)
    (good / "config.json").write_text("{}")
    (good / "w.safetensors").write_bytes(b"x" * 10)
    cands = [f"{tmp_path}/{h}" for h in HOSTILE if h and "\n" not in h] + [str(good)]
    step = ModelDir(cands)
    (values,) = gather_here([step], str(tmp_path))
    assert not list(tmp_path.glob("CANARY*")), "the model probe ran a candidate path"
    assert step.decide(values) == []
    assert step.report(values)["model"]["path"] == str(good)
    # a hostile candidate that exists is reported under its own name
    weird = tmp_path / "$(touch CANARY) it's"
    shutil.copytree(good, weird)
    step = ModelDir([str(weird), str(good)])
    (values,) = gather_here([step], str(tmp_path))
    assert step.report(values)["model"]["path"] == str(weird)
    assert not list(tmp_path.glob("CANARY*"))


@pytest.mark.skipif(not shutil.which("findmnt"), reason="findmnt (util-linux) not installed")
def test_fstab_fields_are_escaped_as_libmount_reads_them(tmp_path):
    mount = "/mnt/my share\\x\t#1"
    host = _host(nfs_server="192.168.160.7", nfs_export="/media/SSD Storage/SW", nfs_mount=mount)
    line = nfs.fstab_line(host)
    assert " " not in line.split(" ", 1)[0] and len(line.split(" ")) == 6, line
    tab = tmp_path / "fstab"
    tab.write_text(line + "\n")
    p = subprocess.run(["findmnt", "-F", str(tab), "-n", "-r", "-o", "SOURCE,TARGET,FSTYPE"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    # -r prints raw fields with libmount's own \x escapes: decode them back
    src, target, fstype = [f.encode().decode("unicode_escape") for f in p.stdout.split()]
    assert (src, target, fstype) == ("192.168.160.7:/media/SSD Storage/SW", mount, "nfs4")
    assert fstab_line("a b", "c") == "a\\040b c"


def test_the_fstab_line_mounts_with_the_inventorys_options_as_the_live_mount_does():
    """After a reboot the share is mounted from fstab: with the options provision mounted it with."""
    host = _host(nfs_server="192.168.160.7", nfs_export="/srv/models", nfs_mount="/mnt/models",
                 nfs_options="ro,vers=4.1,soft,timeo=600", storage_iface="ens34", storage_net="192.168.160.0/24",
                 storage_ip="192.168.160.21")
    live = next(s for s in nfs.steps(host) if type(s).__name__ == "Mount")
    fields = nfs.fstab_line(host).split(" ")
    assert fields[3].split(",")[:4] == live.options.split(",") == ["ro", "vers=4.1", "soft", "timeo=600"], fields
    assert fields[3].endswith(",_netdev,nofail"), fields


def test_ssh_options_read_back_by_openssh(tmp_path):
    if not shutil.which("ssh"):
        pytest.skip("ssh not installed")
    for path in ["/tmp/known hosts", '/tmp/it\'s "q"', "/tmp/back\\slash", "/tmp/100%", "/tmp/Grüße"]:
        opt = ssh_option("UserKnownHostsFile", path)
        p = subprocess.run(["ssh", "-G", "-F", "/dev/null", "-o", opt, "example.invalid"],
                           capture_output=True, text=True)
        assert f"userknownhostsfile {path}\n" in p.stdout, (opt, p.stdout[-300:], p.stderr)
    with pytest.raises(ValueError):
        ssh_option("IdentityFile", "/tmp/a\nb")


def test_rsync_ssh_command_keeps_paths_with_spaces(tmp_path):
    from specfleet.connection import ssh_argv
    key, kh = tmp_path / "my key", tmp_path / "known hosts"
    host = Host("w1", "10.0.0.1", "root", 2222, str(key), str(kh), True, 5, 5, (), {})
    argv = ssh_argv(host)
    p = subprocess.run([argv[0], "-G", *argv[1:], "example.invalid"], capture_output=True, text=True)
    assert f"userknownhostsfile {kh}\n" in p.stdout and f"identityfile {key}\n" in p.stdout, p.stdout


def test_rsync_control_socket_lives_in_the_temporary_folder(tmp_path, monkeypatch):
    """Two controllers (two testbeds, each in its own network namespace) reach the same
    user@address:port on different machines: a shared /tmp socket would send one's rsync to the
    other's host. The socket follows TMPDIR, so each can keep its own."""
    import tempfile
    from specfleet.connection import ssh_argv
    host = Host("w1", "10.10.30.14", "root", 22, None, str(tmp_path / "kh"), True, 5, 5, (), {})
    folders = []
    for name in ("shard one", "shard-two"):
        d = tmp_path / name
        d.mkdir()
        monkeypatch.setenv("TMPDIR", str(d))
        monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() caches its first answer
        argv = ssh_argv(host)
        p = subprocess.run([argv[0], "-G", *argv[1:], "example.invalid"], capture_output=True, text=True)
        line = [l for l in p.stdout.splitlines() if l.startswith("controlpath ")]
        assert line and line[0].startswith(f"controlpath {d}/specfleet-ssh-"), (line, p.stderr)
        folders.append(line[0])
    assert folders[0] != folders[1]


def test_netplan_yaml_values_read_back():
    host = _host(storage_iface="ens35", storage_net="192.168.160.0/24", storage_ip="192.168.160.179",
                 mgmt_iface="ens33", nfs_server="1.2.3.4", nfs_export="/x", nfs_mount="/y")
    text = [s for s in nfs.steps(host) if s.name.endswith("60-specfleet-storage.yaml")][0].step.payload.data.decode()
    doc = yaml.safe_load(text)
    assert doc["network"]["ethernets"]["ens35"]["routes"] == [
        {"to": "192.168.160.0/24", "scope": "link", "from": "192.168.160.179"}]
    for v in HOSTILE:
        assert yaml.safe_load(yaml_str(v)) == v


def test_q_refuses_nul_and_quotes_everything_else(tmp_path):
    with pytest.raises(ValueError):
        q("a\0b")
    for v in HOSTILE:
        p = subprocess.run(["bash", "-c", f"printf %s {q(v)}"], cwd=tmp_path, capture_output=True)
        assert p.stdout.decode() == v
    assert not list(tmp_path.glob("CANARY*"))


# -- no probe or change builds shell text by formatting a value ------------------------------------
SHELL_FUNCS = {"probe", "decide", "_argv", "script", "command", "_listing_command"}
QUOTERS = {"q", "join", "quote", "shlex.quote", "shlex.join"}
# expressions that are never values from an inventory or plan: the step's own constants and counters
SAFE = {"i", "self.LINK_RC", "SECTION", "YES", "NO", "self.token", "LISTING", "sep", "create", "pre", "flip", "verify",
        "probe", "int(wait_s * 5)", "pid", "self.step.probe() or 'true'", "' && '.join(checks)",
        "self.test", "self.unless", "self._argv(True)", "CODE_LISTING",
        "DIFF_VAR", "DIFF_MAX_BYTES", "exact", "LISTINGS",
        "QUERY_FIELDS", "' && '.join(checks)", "PYTHON_VERSION_FLAG"}  # constants of the code, never a value from a file


def _quoted_names(fn: ast.AST) -> set[str]:
    """Local names bound to a quoted word (`d = q(c)`, `v, rels = q(a), q(b)`)."""
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            pairs = []
            for t in node.targets:
                if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs += zip(t.elts, node.value.elts)
                else:
                    pairs.append((t, node.value))
            for t, v in pairs:
                if isinstance(t, ast.Name) and isinstance(v, ast.Call) and ast.unparse(v.func) in QUOTERS:
                    out.add(t.id)
    return out


def _message_nodes(fn: ast.AST) -> set[int]:
    """f-strings that are not shell text: messages, summaries, diffs, comparisons, quoted words."""
    skip, message_names, shell_names = set(), set(), set()
    for node in ast.walk(fn):
        args = []
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name in ("StepFailed", "ValueError"):
                args = node.args
            elif name == "Change":
                args = [a for i, a in enumerate(node.args) if i != 1]
                args += [k.value for k in node.keywords if k.arg != "script"]
                shell = node.args[1:2] + [k.value for k in node.keywords if k.arg == "script"]
                shell_names |= {n.id for a in shell for n in ast.walk(a) if isinstance(n, ast.Name)}
            elif name in QUOTERS:
                args = node.args  # the word is quoted whatever it holds
        elif isinstance(node, ast.Compare):
            args = [node.left, *node.comparators]
        for a in args:
            skip |= {id(n) for n in ast.walk(a)}
            message_names |= {n.id for n in ast.walk(a) if isinstance(n, ast.Name)}
    for node in ast.walk(fn):  # summary = f"..."; Change(summary, ...)
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id in message_names - shell_names
                                                for t in node.targets):
            skip |= {id(n) for n in ast.walk(node.value)}
    return skip


def test_no_shell_text_formats_an_unquoted_value():
    bad = []
    files = sorted((PROJECT / "roles").glob("*.py")) + sorted((PROJECT / "specfleet" / "steps").glob("*.py")) \
        + sorted((PROJECT / "specfleet" / "facts").glob("*.py"))
    for f in files:
        tree = ast.parse(f.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef) or fn.name not in SHELL_FUNCS:
                continue
            quoted, skip = _quoted_names(fn), _message_nodes(fn)
            for node in ast.walk(fn):
                if not isinstance(node, ast.JoinedStr) or id(node) in skip:
                    continue
                literal = "".join(p.value for p in node.values if isinstance(p, ast.Constant))
                if re.fullmatch(r"[A-Za-z0-9/._-]*", literal):
                    continue  # a path or name built from parts (a value); where it lands in shell text is checked
                for part in node.values:
                    if not isinstance(part, ast.FormattedValue):
                        continue
                    expr = ast.unparse(part.value)
                    ok = (expr in SAFE or expr in quoted
                          or (isinstance(part.value, ast.Call) and ast.unparse(part.value.func) in QUOTERS))
                    if not ok:
                        bad.append(f"{f.relative_to(PROJECT)}:{node.lineno} {fn.name}(): {{{expr}}}")
    assert not bad, "shell text formats values without q():\n" + "\n".join(bad)
