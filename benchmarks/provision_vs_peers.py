#!/usr/bin/env python3
"""No-op provisioning of 8 workers: specfleet vs pyinfra vs Ansible, on one namespace testbed.

The same job in each tool, on the same 8 testbed workers (root, same key, strict known_hosts): every
check specfleet's `fab provision --only venv-deploy,env,nvidia,nfs` makes (14 steps per host: base
interpreter, venv release synced, venv symlink, old releases pruned, `import vllm` once per release,
env file, modules-load file, GPU visible, storage address and route, netplan drop-in, fstab line,
mount point, share mounted read-only, share readable), each in the peer's own idiom (facts and guarded
operations in pyinfra, check tasks and `when:` fixes in Ansible: benchmarks/_peer_deploys.py), with
exactly the content specfleet renders, into the release directory specfleet deploys
(/opt/vllm-venv.releases/<digest>-<listing hash>/, `rsync -a --delete`; the "is it already there?"
check is a listing hash in specfleet's probe, `rsync -n -i` in pyinfra, synchronize's own itemized run
in Ansible). `--peer-checks subset`: the smaller peer deploys of the figures before 2026-12-02.

Converge first: specfleet builds the bastion's venv, pyinfra provisions half of the empty workers and
Ansible the other half, then specfleet's run on all 8 must find nothing left to do (the peers did the
same job). Then time no-op runs interleaved (order rotated each round),
after closing every OpenSSH ControlMaster so each run starts cold (as after > 60 s idle).
Every timed run is checked to have changed nothing: specfleet's JSONL event log (0 changed),
Ansible's PLAY RECAP (changed=0), pyinfra's report (every operation "No changes").
Timed: specfleet CLI (Python start-up included, the headline figure), specfleet in-process (the
provision task called in this process, imports done), pyinfra CLI, ansible-playbook CLI with
forks = 8 in two set-ups: default (facts gathered, no pipelining) and tuned (no facts,
pipelining). The peers live in venvs under /var/cache/specfleet/peers-bench ($SPECFLEET_BENCH_TOOLS),
made by --install (it needs the package index). Before timing, specfleet's modules and the ansible.posix
collection are compiled to bytecode, as pip compiles the peers' packages.

    .venv/bin/python benchmarks/provision_vs_peers.py --install                       # once, not isolated
    scripts/isolated .venv/bin/python benchmarks/provision_vs_peers.py [--rounds 5]   # its own testbed
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from _session import ROOT, median, spread, testbed_session
from _peer_deploys import CHECKS, CONTROL_DIR, contents, write_ansible, write_pyinfra

SCRATCH = Path("/var/tmp/specfleet-bench")  # this run's files (private under scripts/isolated)
# the peers' installs: outside /var/tmp, which scripts/isolated makes private (and empty) per run,
# and made with the package index, which an isolated run cannot reach: `--install` first
TOOLS = Path(os.environ.get("SPECFLEET_BENCH_TOOLS", "/var/cache/specfleet/peers-bench"))
ANSIBLE_VENV, PYINFRA_VENV = TOOLS / "ansible-venv", TOOLS / "pyinfra-venv"
COLLECTIONS = TOOLS / "collections"
ONLY = "venv-deploy,env,nvidia,nfs"
WORKERS = 8
PYINFRA_TARGET, ANSIBLE_TARGET = 0.35, 0.05  # specfleet's no-op CLI run over theirs (issue 27)
CHECKOUT_CODE = ("specfleet", "roles", "tasks", "testbed", "fabfile.py")  # = scripts/setup.sh's compileall


# ---- the peers' installs ------------------------------------------------------------------
def sh(argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def ensure_tools(install: bool) -> dict[str, str]:
    """ansible-core (+ the ansible.posix collection, for synchronize) and pyinfra, each in its own venv."""
    TOOLS.mkdir(parents=True, exist_ok=True)
    for venv, pkg, exe in ((ANSIBLE_VENV, "ansible-core>=2.19,<2.20", "ansible-playbook"),
                           (PYINFRA_VENV, "pyinfra>=3,<4", "pyinfra")):
        if not (venv / "bin" / exe).exists():
            if not install:
                raise SystemExit(f"{venv}: {pkg} is not installed; run this benchmark once with --install "
                                 "outside scripts/isolated (it needs the package index)")
            print(f"[setup] installing {pkg} into {venv}", file=sys.stderr, flush=True)
            sh(["/usr/bin/python3", "-m", "venv", "--clear", str(venv)], check=True)
            p = sh([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", pkg])
            if p.returncode:
                raise SystemExit(f"pip install {pkg} failed: {p.stderr[-800:]}")
    posix = COLLECTIONS / "ansible_collections" / "ansible" / "posix"
    if not (posix / "plugins" / "modules" / "synchronize.py").exists():
        if not install:
            raise SystemExit(f"{posix}: the ansible.posix collection is missing; run with --install first")
        # ansible-core ships no synchronize; the `ansible` package on PyPI carries ansible.posix
        print("[setup] fetching the ansible.posix collection (from the `ansible` wheel)", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(dir=TOOLS) as dl:
            p = sh([str(ANSIBLE_VENV / "bin" / "pip"), "download", "-q", "--no-deps", "ansible>=12,<13", "-d", dl])
            if p.returncode:
                raise SystemExit(f"pip download ansible failed: {p.stderr[-800:]}")
            wheel = next(Path(dl).glob("ansible-*.whl"))
            with zipfile.ZipFile(wheel) as z:
                for name in z.namelist():
                    if name.startswith("ansible_collections/ansible/posix/"):
                        z.extract(name, COLLECTIONS)
    versions = {}
    versions["ansible"] = sh([str(ANSIBLE_VENV / "bin" / "ansible-playbook"), "--version"]).stdout.split("\n")[0]
    versions["pyinfra"] = sh([str(PYINFRA_VENV / "bin" / "pyinfra"), "--version"]).stdout.strip()
    m = json.loads((posix / "MANIFEST.json").read_text())["collection_info"]["version"]
    versions["ansible.posix"] = m
    versions["rsync"] = sh(["rsync", "--version"]).stdout.split("\n")[0]
    versions["ssh"] = sh(["ssh", "-V"]).stderr.strip()
    return versions


def compile_code() -> None:
    """specfleet's modules and the ansible.posix collection as bytecode, as pip leaves the peers' packages
    (pip compiles what it installs; an editable checkout, or a collection unpacked from a wheel, is
    compiled on first import, which PYTHONDONTWRITEBYTECODE=1 forbids: then every run compiles again)."""
    sh([sys.executable, "-m", "compileall", "-q", *(str(ROOT / d) for d in CHECKOUT_CODE), str(COLLECTIONS)],
       check=True)


# ---- one run of each tool ------------------------------------------------------------------
def own_and_children_cpu() -> float:
    """CPU seconds of this process and of the children it has reaped (a tool's whole process tree,
    less daemons it left: OpenSSH ControlMasters, which only Ansible's runs start)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def workers_cpu(sshd_pids: list[int]) -> float:
    """CPU seconds the workers spent: each worker's sshd with the sessions it reaped (the tool's
    commands, their shells and probes); /proc/PID/stat utime, stime, cutime, cstime."""
    total = 0
    for pid in sshd_pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def _proc_stats() -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                out.append((d / "stat").read_text())
            except OSError:  # it ended meanwhile
                pass
    return out


class Runner:
    def __init__(self, work: Path, inv_path: Path, inv, adir: Path, pdir: Path, sshd_pids: list[int]):
        self.work, self.inv_path, self.inv = work, inv_path, inv
        self.sshd_pids = sshd_pids
        self.cpu = (0.0, 0.0)  # the last timed run's (bastion, workers) CPU seconds
        self.adir, self.pdir = adir, pdir
        self.runs = work / "runs"
        self.env = {**os.environ, "SPECFLEET_RUNS_DIR": str(self.runs), "SPECFLEET_INVENTORY": str(inv_path)}

    def close_masters(self) -> None:
        """Every OpenSSH ControlMaster this benchmark's runs left, so the next run starts cold."""
        for h in self.inv.select("workers"):
            from specfleet.connection import ssh_argv
            sh([*ssh_argv(h), "-O", "exit", h.address])
        for sock in CONTROL_DIR.glob("*"):
            sh(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "placeholder"])

    @contextlib.contextmanager
    def _cpu(self):
        c0 = own_and_children_cpu()
        self.workers_from = workers_cpu(self.sshd_pids)
        yield
        self.cpu = (own_and_children_cpu() - c0, workers_cpu(self.sshd_pids) - self.workers_from)

    def workers_since_run(self) -> float:
        """The workers' CPU since the last timed run began: after close_masters, so that sessions a
        ControlMaster kept open (Ansible's) are counted once they end."""
        self.settle()
        return workers_cpu(self.sshd_pids) - self.workers_from

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until every worker's sshd has reaped its sessions: a session's CPU reaches the sshd's
        counters only then (else the converge run's rsync sessions land in the first timed run)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(int(st.rsplit(")", 1)[1].split()[1]) in self.sshd_pids for st in _proc_stats()):
                return
            time.sleep(0.02)
        print(f"[cpu] a worker's sshd still has sessions after {timeout:.0f} s: its CPU figure is low",
              file=sys.stderr)

    def _timed(self, argv, cwd=None, env=None) -> tuple[float, subprocess.CompletedProcess]:
        with self._cpu():
            t0 = time.perf_counter()
            p = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env or self.env)
            t = time.perf_counter() - t0
        return t, p

    def _last_log(self) -> dict:
        log = max(self.runs.glob("*-provision-*.jsonl"), key=lambda p: p.stat().st_mtime)
        recs = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()]
        steps = [r for r in recs if r["event"] == "step"]
        return {"steps": len(steps), "changed": sum(r["changed"] for r in steps),
                "changes": [r for r in steps if r["changed"]],
                "bad": [r for r in steps if r["status"] in ("failed", "unreachable")], "log": log}

    def specfleet_cli(self, only=ONLY) -> tuple[float, int, str]:
        t, p = self._timed([str(ROOT / ".venv" / "bin" / "fab"), "provision", "--only", only], cwd=ROOT)
        s = self._last_log()
        if p.returncode or s["bad"]:
            raise SystemExit(f"fab provision failed (rc {p.returncode}): {p.stdout[-1500:]}{p.stderr[-800:]}")
        note = f"{s['steps']} steps, {s['changed']} changed ({s['log'].name})"
        if s["changed"]:  # what changed, the first few (a converge changes every step of every worker)
            shown = [f"{r['host']} {r['step']}" for r in s["changes"][:4]]
            note += ": " + "; ".join(shown) + ("; ..." if s["changed"] > len(shown) else "")
        return t, s["changed"], note

    def specfleet_inproc(self) -> tuple[float, int, str]:
        from invoke import Context
        from invoke.exceptions import Exit
        from specfleet.tasks.provision import provision
        os.environ.update(SPECFLEET_RUNS_DIR=str(self.runs))
        buf = io.StringIO()
        t0 = time.perf_counter()
        with self._cpu(), contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                provision(Context(), inventory=str(self.inv_path), only=ONLY)
            except Exit as e:
                if e.code:
                    raise SystemExit(f"in-process provision exit {e.code}: {buf.getvalue()[-1500:]}")
        t = time.perf_counter() - t0
        s = self._last_log()
        return t, s["changed"], f"{s['steps']} steps, {s['changed']} changed"

    def ansible(self, mode: str, limit: list[str] | None = None) -> tuple[float, int, str]:
        env = {**os.environ, "ANSIBLE_CONFIG": str(self.adir / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_HOME": str(self.adir / "home"), "ANSIBLE_LOCAL_TEMP": str(self.adir / "tmp")}
        if mode == "tuned":
            env["ANSIBLE_PIPELINING"] = "True"
        argv = [str(ANSIBLE_VENV / "bin" / "ansible-playbook"), str(self.adir / f"play-{mode}.yml")]
        t, p = self._timed(argv + (["--limit", ",".join(limit)] if limit else []), cwd=self.adir, env=env)
        recap = re.findall(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", p.stdout, re.M)
        if p.returncode or len(recap) != len(limit or range(WORKERS)) or any(int(r[3]) or int(r[4]) for r in recap):
            raise SystemExit(f"ansible-playbook ({mode}) failed (rc {p.returncode}): {p.stdout[-2500:]}{p.stderr[-800:]}")
        changed = sum(int(r[2]) for r in recap)
        return t, changed, f"recap: ok={recap[0][1]} changed={changed} over {len(recap)} hosts"

    def pyinfra(self, limit: list[str] | None = None) -> tuple[float, int, str]:
        argv = [str(PYINFRA_VENV / "bin" / "pyinfra"), "-y", "inventory.py", "deploy.py"]
        t, p = self._timed(argv + [a for name in limit or () for a in ("--limit", name)], cwd=self.pdir)
        out = p.stdout + p.stderr
        if p.returncode:
            raise SystemExit(f"pyinfra failed (rc {p.returncode}): {out[-2500:]}")
        nochange = len(re.findall(r"No changes", out))
        success = len(re.findall(r"\] Success\b", out))
        return t, success, f"{nochange} 'No changes', {success} 'Success'"


def write_peers(r0: Runner, inv, checks: str) -> None:
    c = contents(inv)
    write_ansible(r0.work, inv, c, checks, COLLECTIONS)
    write_pyinfra(r0.work, inv, c, checks)


def converge_from_empty(r0: Runner, inv) -> None:
    """Each peer from empty workers: specfleet builds (or finds) the bastion's venv only, pyinfra provisions the
    first half of the workers and Ansible the second; then specfleet's run on all of them must find nothing left
    to do (the peers did the same job), and each peer runs once on all 8 (on what specfleet and the other left)."""
    t, ch, note = r0.specfleet_cli(only="venv")
    print(f"converge  specfleet {t:6.2f} s  the bastion's venv ({note})")
    write_peers(r0, inv, "same")
    hosts = inv.select("workers")
    first, second = hosts[:len(hosts) // 2], hosts[len(hosts) // 2:]
    for name, on, fn in (("pyinfra", first, lambda: r0.pyinfra([h.address for h in first])),
                         ("ansible", second, lambda: r0.ansible("default", [h.name for h in second]))):
        t, ch, note = fn()
        print(f"converge  {name:<9} {t:6.2f} s  from empty on {','.join(h.name for h in on)}: {note}")
    t, ch, note = r0.specfleet_cli()
    print(f"converge  specfleet {t:6.2f} s  after the peers, all workers: {note}")
    if ch:
        raise SystemExit("the peers' converge left work that specfleet's run did: they do not do the same job")
    for name, fn in (("pyinfra", r0.pyinfra), ("ansible", lambda: r0.ansible("default"))):
        t, ch, note = fn()
        print(f"converge  {name:<9} {t:6.2f} s  all workers: {note}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--peer-checks", choices=CHECKS, default=CHECKS[0],
                    help="same: the peers make every check specfleet makes (the default, and the target line's); "
                         "subset: the smaller peer deploys of the figures before 2026-12-02")
    ap.add_argument("--keep-work", action="store_true", help="keep the playbook, deploy and logs (printed path)")
    ap.add_argument("--install", action="store_true",
                    help=f"install the peers into {TOOLS} (needs the package index) and exit")
    args = ap.parse_args()
    if args.install:
        print("tools: " + "; ".join(f"{k} {v}" for k, v in ensure_tools(install=True).items()))
        return 0
    print(__doc__.split("\n    .venv")[0].rstrip() + "\n")
    versions = ensure_tools(install=False)
    compile_code()
    SCRATCH.mkdir(parents=True, exist_ok=True)
    print("tools: " + "; ".join(f"{k} {v}" for k, v in versions.items()))
    work = Path(tempfile.mkdtemp(prefix="provision-vs-peers-", dir=SCRATCH))
    from specfleet.inventory import load_inventory
    from specfleet.roles import vars_model
    times: dict[str, list[float]] = {}
    cpu: dict[str, list[tuple[float, float]]] = {}  # CPU seconds per run: (bastion, workers)
    try:
        with testbed_session(WORKERS, work / "testbed.yml") as (tb, inv_path):
            inv = load_inventory(inv_path, vars_model=vars_model())
            r0 = Runner(work, inv_path, inv, work / "ansible", work / "pyinfra",
                        [tb.pid(h.name) for h in inv.select("workers")])
            if args.peer_checks == "same":
                converge_from_empty(r0, inv)
            else:  # as the subset's figures were taken: specfleet first, then the peers on its work
                t, ch, note = r0.specfleet_cli(only="venv," + ONLY)
                print(f"converge  specfleet {t:6.2f} s  {note}")
                write_peers(r0, inv, args.peer_checks)
                for name, fn in (("ansible", lambda: r0.ansible("default")), ("pyinfra", r0.pyinfra)):
                    t, ch, note = fn()
                    print(f"converge  {name:<9} {t:6.2f} s  {note}")
            r0.close_masters()
            r0.settle()  # the converge runs' sessions, before the first timed run counts CPU
            tools = {
                "specfleet": r0.specfleet_cli, "specfleet-inproc": r0.specfleet_inproc, "pyinfra": r0.pyinfra,
                "ansible-default": lambda: r0.ansible("default"), "ansible-tuned": lambda: r0.ansible("tuned"),
            }
            names = list(tools)
            print(f"\n{'round':>5} {'tool':<17} {'seconds':>8} {'CPU bastion':>11} {'workers':>8}  check")
            for rnd in range(args.rounds):
                order = names[rnd % len(names):] + names[:rnd % len(names)]
                for name in order:
                    t, changed, note = tools[name]()
                    r0.close_masters()
                    bastion, workers = r0.cpu[0], r0.workers_since_run()
                    if changed:
                        raise SystemExit(f"{name}: a timed no-op run changed something: {note}")
                    times.setdefault(name, []).append(t)
                    cpu.setdefault(name, []).append((bastion, workers))
                    print(f"{rnd + 1:>5} {name:<17} {t:8.3f} {bastion:11.2f} {workers:8.2f}  {note}", flush=True)
    finally:
        subprocess.run(["rm", "-rf", "--", str(CONTROL_DIR)])
        if not args.keep_work:
            subprocess.run(["rm", "-rf", "--", str(work)])
        else:
            print(f"work dir kept: {work}")
    print(f"\nmedians over {args.rounds} interleaved rounds [min-max], 8 workers, every run checked to change nothing:")
    for name, xs in times.items():
        b, w = median([c[0] for c in cpu[name]]), median([c[1] for c in cpu[name]])
        print(f"  {name:<17} {median(xs):7.3f} s  [{spread(xs)}]   CPU: bastion {b:5.2f} s + workers {w:5.2f} s")
    sf, py = median(times["specfleet"]), median(times["pyinfra"])
    an, ad = median(times["ansible-tuned"]), median(times["ansible-default"])
    print(f"\nratios (specfleet CLI): {sf / py:.2f} x pyinfra (target <= {PYINFRA_TARGET}), {sf / an:.3f} x Ansible "
          f"tuned (target <= {ANSIBLE_TARGET}), {sf / ad:.3f} x Ansible default")
    print(f"targets: {'met' if sf <= PYINFRA_TARGET * py else 'MISSED'} vs pyinfra, "
          f"{'met' if sf <= ANSIBLE_TARGET * an else 'MISSED'} vs Ansible tuned")
    total = {name: median([b + w for b, w in cs]) for name, cs in cpu.items()}
    print(f"CPU ratios (bastion + workers, load-independent): {total['specfleet'] / total['pyinfra']:.2f} x pyinfra, "
          f"{total['specfleet'] / total['ansible-tuned']:.3f} x Ansible tuned")
    print(f"no-op provision, 8 workers: specfleet {sf:.2f} s, pyinfra {py:.2f} s, ansible {an:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
