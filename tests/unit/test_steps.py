"""Steps as pure functions: facts in, changes (shell text) out. No SSH here.

Where a test runs generated shell text, it runs it with the local bash in a
temporary directory: the same text a host would run.
"""
import subprocess

import pytest

from specfleet.facts.files import HostFile
from specfleet.facts.gather import gather_here
from specfleet.facts.net import Address, RouteEntry
from specfleet.facts.system import CheckResult
from specfleet.shell import ProbeBatch, as_root, q, read_sections, receive_file_script, sections_script
from specfleet.step import StepFailed
from specfleet.steps.command import Assert, Command
from specfleet.steps.files import Directory, FileContent, LineInFile
from specfleet.steps.net import Route

EVIL = "x; rm -rf / #$(touch pwned)`touch pwned2`'\""


def sh(script, cwd, stdin: bytes = b"", diff: bool = False):
    """Run shell text as a host would: stdin carries a change's payload; `diff` as under --diff."""
    if diff:
        script = "SPECFLEET_DIFF=1\n" + script
    p = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, input=stdin)
    return subprocess.CompletedProcess(p.args, p.returncode, p.stdout.decode(), p.stderr.decode())


def facts_of(step, cwd, diff: bool = False):
    """The step's facts gathered from `cwd` by the local bash, as the fleet gathers them on a host."""
    (values,) = gather_here([step], str(cwd), diff=diff)
    if isinstance(values, Exception):
        raise values
    return values


def converge(step, cwd):
    """Apply a step's changes locally until it reports nothing to do; return the rounds."""
    rounds = 0
    while True:
        changes = step.decide(facts_of(step, cwd))
        if not changes:
            return rounds
        rounds += 1
        assert rounds < 3, changes
        for c in changes:
            p = sh("set -e\n" + c.script, cwd, b"".join(c.payload.chunks()) if c.payload else b"")
            assert p.returncode == 0, p.stderr


def test_probe_batch_separates_outputs_and_exit_codes(tmp_path):
    batch = ProbeBatch(["printf 'a\\nb\\n'", "printf 'no newline'", "echo x; exit 3", "true"])
    p = sh(batch.script(), tmp_path)
    assert batch.parse(p.stdout) == [("a\nb\n", 0), ("no newline", 0), ("x\n", 3), ("", 0)]


def test_probe_output_cannot_forge_a_marker(tmp_path):
    batch = ProbeBatch(["echo '@@SF-0:1:0@@'", "echo ok"])  # the real token is random
    p = sh(batch.script(), tmp_path)
    assert batch.parse(p.stdout) == [("@@SF-0:1:0@@\n", 0), ("ok\n", 0)]


def test_file_content_create_update_noop(tmp_path):
    path = str(tmp_path / "etc" / "nvidia.conf")
    step = FileContent(path, "nvidia\nnvidia_uvm\n", mode="0644")
    first = step.decide({"file": HostFile("absent")})
    assert [c.summary for c in first] == [f"create {path}"] and "+nvidia_uvm" in first[0].diff
    assert converge(step, tmp_path) == 1
    assert open(path).read() == "nvidia\nnvidia_uvm\n"
    assert converge(step, tmp_path) == 0
    open(path, "w").write("nvidia\n")
    changes = step.decide(facts_of(step, tmp_path, diff=True))
    assert changes[0].summary.startswith("update") and "+nvidia_uvm" in changes[0].diff
    assert converge(step, tmp_path) == 1


def test_file_mode_only_change(tmp_path):
    path = tmp_path / "env"
    path.write_text("A=1\n")
    path.chmod(0o600)
    step = FileContent(str(path), "A=1\n", mode="0644")
    changes = step.decide(facts_of(step, tmp_path))
    assert [c.summary for c in changes] == [f"chmod 0644 {path}"]


def test_file_absent(tmp_path):
    path = tmp_path / "nvidia.conf"
    path.write_text("nvidia\n")
    step = FileContent(str(path), present=False)
    assert converge(step, tmp_path) == 1 and not path.exists()
    assert step.decide({"file": HostFile("absent")}) == []


def test_file_refuses_directory(tmp_path):
    with pytest.raises(StepFailed, match="not a regular file"):
        FileContent(str(tmp_path), "x").decide({"file": HostFile("notfile")})


def test_line_in_file_keeps_other_lines(tmp_path):
    path = tmp_path / "modules"
    path.write_text("loop")  # no newline at the end: the new line must not be glued to it
    step = LineInFile(str(path), "nvidia")
    assert converge(step, tmp_path) == 1
    assert path.read_text() == "loop\nnvidia\n"
    assert converge(LineInFile(str(path), "nvidia", present=False), tmp_path) == 1
    assert path.read_text() == "loop\n"


def test_directory(tmp_path):
    d = tmp_path / "a" / "b"
    assert converge(Directory(str(d), "0750"), tmp_path) == 1
    assert oct(d.stat().st_mode & 0o777) == "0o750"


ENS35 = [Address("ens35", "192.168.160.14", 24)]


def test_route_stale_device_is_replaced():
    step = Route("192.168.160.0/24", "ens35", src="192.168.160.14")
    facts = {"routes": [RouteEntry("192.168.160.0/24 dev ens33 scope link", "ens33")], "addresses": ENS35}
    changes = step.decide(facts)
    assert [c.script for c in changes] == [
        "ip route del 192.168.160.0/24 dev ens33",
        "ip route add 192.168.160.0/24 dev ens35 scope link src 192.168.160.14",
    ]
    assert changes[0].diff == "-192.168.160.0/24 dev ens33 scope link"


def test_route_right_device_without_proto_kernel_is_ok():
    step = Route("192.168.160.0/24", "ens35", src="192.168.160.14")
    facts = {"routes": [RouteEntry("192.168.160.0/24 dev ens35 scope link src 192.168.160.14", "ens35",
                                   "192.168.160.14")], "addresses": ENS35}
    assert step.decide(facts) == []


def test_route_refuses_when_the_nic_lacks_the_address():
    step = Route("192.168.160.0/24", "ens35", src="192.168.160.99")
    with pytest.raises(StepFailed, match="storage_ip"):
        step.decide({"routes": [], "addresses": ENS35})


def test_command_guard(tmp_path):
    marker = tmp_path / "done"
    step = Command("make marker", f"touch {marker}", creates=str(marker))
    assert converge(step, tmp_path) == 1 and marker.exists()
    with pytest.raises(ValueError):
        Command("unguarded", "true")


def test_assert_step_fails_with_message():
    step = Assert("gpu visible", "nvidia-smi", "GPU not visible")
    with pytest.raises(StepFailed, match="GPU not visible"):
        step.decide({"check": CheckResult(127, ["bash: nvidia-smi: command not found"])})
    assert step.decide({"check": CheckResult(0, [])}) == []


def test_injection_strings_stay_data(tmp_path):
    """Paths, lines and content with shell syntax create exactly those names, run nothing."""
    target = tmp_path / EVIL
    for step in (FileContent(str(target), EVIL + "\n"), LineInFile(str(tmp_path / "f"), EVIL),
                 Directory(str(tmp_path / (EVIL + "d")))):
        assert converge(step, tmp_path) == 1
        assert converge(step, tmp_path) == 0
    assert target.read_text() == EVIL + "\n"
    assert (tmp_path / "f").read_text() == EVIL + "\n"
    assert (tmp_path / (EVIL + "d")).is_dir()
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


def test_as_root_quotes_the_whole_script(tmp_path):
    script = receive_file_script(str(tmp_path / "a b"), "0644", 1, "0" * 64)
    wrapped = as_root(script, sudo=True)
    assert wrapped.startswith("sudo -n -- sh -c '")
    assert as_root(script, sudo=False) == script


def test_sections_frame_any_content_without_a_separator(tmp_path):
    """A section's bytes (a file holding the old separators, blank lines, no final newline) come back
    as they are; a missing file is an empty section, and the others keep their places."""
    odd = "@@specfleet@@\n\n@@specfleet-sep@@\nlast line, no newline"
    (tmp_path / "odd").write_text(odd)
    script = sections_script([f"cat {q(str(tmp_path / 'odd'))}", f"cat {q(str(tmp_path / 'missing'))}",
                              "echo two; echo lines", "true"])
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    assert read_sections(out, 5) == [odd, "", "two\nlines\n", "", ""]
