"""A chaos run on the testbed (issue 28): during one campaign, a seeded, bounded schedule drops SSH
sessions, reboots a worker, SIGKILLs a runner and a server, fills a worker's disk and frees it, and
restarts `fab bench` / `fab collect` at random points; then the campaign is finished (provision the
rebooted worker, `fab bench` until nothing is left, at most ROUNDS times) and collected.

`run_seed` returns what survived and what was lost; tests/e2e/test_chaos.py asserts on it for a few
seeds, benchmarks/chaos_seeds.py runs more and prints the counts. Every process ended here is one this
run started (the testbed's), found by PID in the worker's own network namespace.
"""
from __future__ import annotations

import json
import os
import random
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from e2e_helpers import FAB, PROJECT, fab, host_sh, inventory_of, worker_procs

FAST = PROJECT / "tests/e2e/plans/fast.yml"
WORK = "/var/lib/specfleet/campaigns"
ROUNDS = 3
FULL_MB = 16                          # the full worker's run folder: a tmpfs of this size
FILL_BYTES = (FULL_MB + 1) * 2**20    # more than it holds, so the fill ends at ENOSPC, bounded
ACTIONS = ("drop", "reboot", "kill_runner", "kill_server", "fill", "restart_bench", "collect")

STATUS_RE = re.compile(r"\[(?P<item>[^\]]+)\] (?P<status>[a-z_]+):")


@dataclass
class Outcome:
    seed: int
    schedule: list[str] = field(default_factory=list)
    cells: dict[tuple[str, int, str], tuple[str, str]] = field(default_factory=dict)  # (cfg, conc, node)
    mismatched: list[str] = field(default_factory=list)   # merged numbers that differ from worker files
    twice: list[str] = field(default_factory=list)        # items measured again after they were done
    rewritten: list[str] = field(default_factory=list)    # done results whose bytes changed later
    crashes: list[str] = field(default_factory=list)      # a fab run with a traceback or exit 70/1
    seconds: float = 0.0

    @property
    def merged(self) -> int:
        return sum(s == "merged" for s, _ in self.cells.values())

    @property
    def lost(self) -> list[str]:
        """Cells neither merged nor listed with a cause."""
        return [f"{k}: {s}" for k, (s, why) in self.cells.items() if s != "merged" and not why.strip()]


def procs(tb, host: str) -> list[tuple[int, str]]:
    return worker_procs(tb, host, check=False)


def state(tb, host: str, campaign: str) -> dict:
    p = host_sh(tb, host, f"cat {WORK}/{campaign}/{host}/state.json 2>/dev/null")
    try:
        return json.loads(p.stdout) if p.stdout.strip() else {}
    except ValueError:
        return {}


def plan_for(tmp_path: Path, seed: int) -> tuple[Path, str]:
    doc = yaml.safe_load(FAST.read_text())
    doc["benchmark"]["dataset_path"] = str((FAST.parent / doc["benchmark"]["dataset_path"]).resolve())
    doc["campaign"] = f"chaos-{seed}"
    doc["server"]["health_timeout_s"] = 60
    p = tmp_path / f"plan-{seed}.yml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p, doc["campaign"]


def report_cells(camp: Path) -> dict[tuple[str, int, str], tuple[str, str]]:
    md = (camp / "report.md").read_text() if (camp / "report.md").is_file() else ""
    sec = md.split("## Planned cells", 1)[-1].split("\n## ", 1)[0] if "## Planned cells" in md else ""
    rows = {}
    for ln in sec.splitlines():
        parts = [p.strip() for p in ln.strip().strip("|").split(" | ")]
        if len(parts) == 6 and parts[1].isdigit():
            rows[(parts[0], int(parts[1]), parts[2])] = (parts[3], parts[5])
    return rows


def _checked(r: subprocess.CompletedProcess, what: str, out: Outcome) -> subprocess.CompletedProcess:
    text = r.stdout + r.stderr
    if "Traceback" in text or r.returncode in (1, 70):
        out.crashes.append(f"{what}: exit {r.returncode}: {text[-1500:]}")
    return r


def done_results(tb, host: str, campaign: str) -> dict[str, str]:
    """Result file -> sha256 for the items with a done marker on `host`."""
    d = shlex.quote(f"{WORK}/{campaign}/{host}")
    sh = (f"cd {d} 2>/dev/null || exit 0; for m in *.done; do [ -e \"$m\" ] || continue; c=${{m%.done}}; "
          f"for f in \"$c\"_conc*.json; do [ -f \"$f\" ] && sha256sum -- \"$f\"; done; done")
    return {ln.split()[1]: ln.split()[0] for ln in host_sh(tb, host, sh).stdout.splitlines() if ln.strip()}


def _live_pid(tb, order: list[str], campaign: str, kind: str, wait_s: float = 3.0) -> tuple[str, int | None]:
    """(host, PID) of a live runner or vLLM server of this campaign on the first host in `order` that
    has one, polled for up to `wait_s`; (order[0], None) when none is alive."""
    deadline = time.monotonic() + wait_s
    while True:
        for h in order:
            st = state(tb, h, campaign)
            alive = {p for p, _ in procs(tb, h)}
            if kind == "runner":
                cands = [st.get("runner_pid")]
            else:
                cands = [i.get("server_pid") for i in st.get("items", [])
                         if i.get("status") in ("loading", "benchmarking")]
            pid = next((p for p in cands if p and p in alive), None)
            if pid:
                return h, pid
        if time.monotonic() > deadline:
            return order[0], None
        time.sleep(0.2)


def run_seed(tb, tmp_path: Path, seed: int, log=print) -> Outcome:
    rng = random.Random(seed)
    t0 = time.monotonic()
    out = Outcome(seed)
    plan, campaign = plan_for(tmp_path, seed)
    inv = inventory_of(tb)
    hosts = list(tb.workers)
    results = tmp_path / f"results-{seed}"
    env = {**os.environ, "COLUMNS": "200", "SPECFLEET_INVENTORY": str(inv)}
    full_host = rng.choice(hosts)
    full_dir = f"{WORK}/{campaign}/{full_host}"
    mounted = host_sh(tb, full_host, f"mkdir -p {full_dir} && mount -t tmpfs -o size={FULL_MB}m sf-chaos {full_dir}")
    assert mounted.returncode == 0, mounted.stderr
    # the schedule: every action once, in a seeded order (fill before its free), at seeded times
    actions = list(ACTIONS)
    rng.shuffle(actions)
    actions.insert(rng.randint(actions.index("fill") + 1, len(actions)), "free")
    rebooted: list[str] = []
    seen: dict[tuple[str, str], str] = {}
    n = 0

    def start_bench():
        nonlocal n
        n += 1
        logf = open(tmp_path / f"chaos-{seed}-bench-{n}.log", "w")
        return subprocess.Popen([FAB, "bench", "--plan", str(plan), "--poll", "0.5"], cwd=PROJECT,
                                env={**env, "SPECFLEET_RUNS_DIR": str(tmp_path / f"runs-{seed}-{n}")},
                                stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)

    def remember():
        for h in hosts:
            for f, digest in done_results(tb, h, campaign).items():
                seen.setdefault((h, f), digest)

    follower = start_bench()
    try:
        for action in actions:
            time.sleep(rng.uniform(0.5, 2.5))
            # the full host is never the one rebooted: a reboot takes its small tmpfs away
            live = [h for h in hosts if h not in rebooted and (action != "reboot" or h != full_host)]
            h = rng.choice(live)
            what = action
            if action == "drop":  # every SSH session to h ends (its sshd children), the listener stays
                listener = tb.pid(h)
                for pid, argv in procs(tb, h):
                    if argv.startswith("sshd") and pid != listener:
                        os.kill(pid, signal.SIGKILL)
                what = f"drop ssh sessions to {h}"
            elif action == "reboot":
                tb.reboot(h)
                rebooted.append(h)
                what = f"reboot {h}"
            elif action in ("kill_runner", "kill_server"):
                # a live one on some worker, the seeded worker first (polled briefly: between items none runs)
                order = [h] + [x for x in rng.sample(live, len(live)) if x != h]
                h, pid = _live_pid(tb, order, campaign, "runner" if action == "kill_runner" else "server")
                if pid:
                    os.kill(pid, signal.SIGKILL)
                what = f"SIGKILL {action.split('_')[1]} {pid} on {h}" if pid else f"{action}: none alive"
            elif action == "fill":  # bounded, and only into the small tmpfs: never the real disk
                host_sh(tb, full_host, f"[ \"$(findmnt -n -o FSTYPE --mountpoint {full_dir})\" = tmpfs ] && "
                                       f"head -c {FILL_BYTES} /dev/zero > {full_dir}/filler 2>/dev/null; true")
                what = f"fill {full_host}'s disk"
            elif action == "free":
                host_sh(tb, full_host, f"rm -f {full_dir}/filler")
                what = f"free {full_host}'s disk"
            elif action == "restart_bench":
                os.killpg(follower.pid, signal.SIGKILL)
                follower.wait()
                follower = start_bench()
                what = "restart fab bench"
            elif action == "collect":
                _checked(fab("collect", "--plan", str(plan), "--results", str(results), inventory=inv,
                             runs=tmp_path / f"runs-{seed}-collect-mid", timeout=180), "mid collect", out)
            remember()
            out.schedule.append(what)
            log(f"[chaos seed {seed}] t={time.monotonic() - t0:5.1f}s {what}")
        host_sh(tb, full_host, f"rm -f {full_dir}/filler")
        try:
            follower.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(follower.pid, signal.SIGKILL)
            follower.wait()
    finally:
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
            follower.wait()
    # finish: the rebooted worker provisioned, then fab bench until every runner is done
    if rebooted:
        _checked(fab("provision", "--hosts", ",".join(rebooted), inventory=inv, runs=tmp_path / f"runs-{seed}-prov",
                     timeout=300), "provision", out)
    for k in range(ROUNDS):
        r = _checked(fab("bench", "--plan", str(plan), "--poll", "0.5", inventory=inv,
                         runs=tmp_path / f"runs-{seed}-finish-{k}", timeout=300), f"finish bench {k}", out)
        remember()
        if r.returncode == 0:
            break
    c = _checked(fab("collect", "--plan", str(plan), "--results", str(results), inventory=inv,
                     runs=tmp_path / f"runs-{seed}-collect", timeout=180), "final collect", out)
    log(f"[chaos seed {seed}] final collect exit {c.returncode}")
    camp = results / campaign
    out.cells = report_cells(camp)
    # no merged number differs from its worker file
    rows = json.loads((camp / "merged.json").read_text()) if (camp / "merged.json").is_file() else []
    for row in rows:
        name = f"{row['config']}_conc{row['concurrency']}.json"
        got = host_sh(tb, row["node"], f"cat {WORK}/{campaign}/{row['node']}/{name}").stdout
        try:
            worker = json.loads(got)["output_throughput"]
        except (ValueError, KeyError):
            worker = None
        if worker is None or abs(worker - row["output_tok_s"]) > 1e-9 * max(1.0, abs(worker)):
            out.mismatched.append(f"{row['node']}:{name}: merged {row['output_tok_s']} vs worker {worker}")
    # no result measured twice: a done result never changed, and no item ran again after it was done
    now = {(h, f): d for h in hosts for f, d in done_results(tb, h, campaign).items()}
    out.rewritten = [f"{h}:{f}" for (h, f), d in seen.items() if now.get((h, f)) not in (None, d)]
    for h in hosts:
        text = host_sh(tb, h, f"cat {WORK}/{campaign}/{h}/runner.log 2>/dev/null").stdout
        finished: set[str] = set()
        for m in STATUS_RE.finditer(text):
            item, status = m["item"], m["status"]
            if status == "done":
                finished.add(item)
            elif status in ("loading", "benchmarking") and item in finished:
                out.twice.append(f"{h}:{item} ({status} after done)")
                finished.discard(item)
    host_sh(tb, full_host, f"umount -l {full_dir}; true")
    out.seconds = time.monotonic() - t0
    log(f"[chaos seed {seed}] {out.merged}/{len(out.cells)} cells merged, lost {len(out.lost)}, "
        f"mismatched {len(out.mismatched)}, measured twice {len(out.twice)}, {out.seconds:.0f} s")
    return out
