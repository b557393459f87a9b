"""Facts about the system: a shell test, a check's outcome, kernel, OS, hostname, a mount,
a kernel module's vermagic, an interpreter's version."""
from __future__ import annotations

from dataclasses import dataclass

from ..quoting import q
from .base import Fact, FactError, lines


@dataclass(frozen=True)
class ShellTest(Fact):
    """Whether shell `test` succeeds on the host. `test` is shell text a role wrote (never a
    value from an inventory unquoted)."""

    test: str

    def command(self) -> str:
        return f"if ( {self.test} ) >/dev/null 2>&1; then echo yes; else echo no; fi"

    def parse(self, stdout: str, rc: int) -> bool:
        got = lines(stdout)[-1:]
        if got not in (["yes"], ["no"]):
            raise FactError(f"could not evaluate the test {self.test!r}")
        return got == ["yes"]


@dataclass(frozen=True)
class CheckResult:
    rc: int
    tail: list[str]  # the last lines the check printed (stdout and stderr)


@dataclass(frozen=True)
class ShellCheck(Fact):
    """Shell `test`'s exit code and the last 5 lines it printed."""

    test: str

    def command(self) -> str:
        return (f"sf_out=$( {{ {self.test}\n}} 2>&1 ); sf_rc=$?; "
                f"[ -z \"$sf_out\" ] || printf '%s\\n' \"$sf_out\" | tail -n 5; exit $sf_rc")

    def parse(self, stdout: str, rc: int) -> CheckResult:
        return CheckResult(rc, lines(stdout))


@dataclass(frozen=True)
class Kernel(Fact):
    def command(self) -> str:
        return "uname -r"

    def parse(self, stdout: str, rc: int) -> str:
        return (lines(stdout) or ["?"])[0]


@dataclass(frozen=True)
class OsName(Fact):
    def command(self) -> str:
        return ". /etc/os-release && echo \"$PRETTY_NAME\""

    def parse(self, stdout: str, rc: int) -> str:
        return (lines(stdout) or ["?"])[0] if rc == 0 else "?"


@dataclass(frozen=True)
class Hostname(Fact):
    def command(self) -> str:
        return "hostname"

    def parse(self, stdout: str, rc: int) -> str:
        return (lines(stdout) or ["?"])[0]


@dataclass(frozen=True)
class ModuleVermagic(Fact):
    """The kernel release a module was built for (modinfo's vermagic, first word); None when
    modinfo or the module is not there."""

    module: str

    def command(self) -> str:
        return f"command -v modinfo >/dev/null && modinfo -F vermagic {q(self.module)} 2>/dev/null | head -n1"

    def parse(self, stdout: str, rc: int) -> str | None:
        words = stdout.split()
        return words[0] if words else None


@dataclass(frozen=True)
class MountInfo:
    source: str
    options: list[str]


@dataclass(frozen=True)
class MountPoint(Fact):
    """What is mounted at `target` (findmnt), None when nothing is."""

    target: str

    def command(self) -> str:
        return f"findmnt -n -o SOURCE,OPTIONS --mountpoint {q(self.target)}"

    def parse(self, stdout: str, rc: int) -> MountInfo | None:
        got = lines(stdout)
        if rc != 0 or not got:
            return None
        source, _, opts = got[0].partition(" ")
        return MountInfo(source, [o for o in opts.strip().split(",") if o])


# The one Python-version probe: the workers' base interpreter (BaseInterpreter) and the
# bastion's (specfleet/venv_build.py check_base_python) are read by the same command and parser.
# `-V` answers before the interpreter starts up (no site, no code run): ~0 ms against ~20 ms for
# `-c` on every worker of every run; whether it runs code is the venv import check's question.
PYTHON_VERSION_FLAG = "-V"  # prints "Python 3.12.3"


@dataclass(frozen=True)
class Interpreter:
    version: str | None  # "3.12.3"; None when it does not run
    output: str = ""      # what it printed instead (the last lines), when it does not run


@dataclass(frozen=True)
class PythonVersion(Fact):
    path: str

    def command(self) -> str:
        return f"{q(self.path)} {PYTHON_VERSION_FLAG} 2>&1"

    def parse(self, stdout: str, rc: int) -> Interpreter:
        got = lines(stdout)
        last = got[-1].removeprefix("Python ") if got else ""
        if rc == 0 and last[:1].isdigit():
            return Interpreter(last)
        return Interpreter(None, "\n".join(got[-3:])[-200:])
