#!/usr/bin/env python3
"""Fleet overhead: what one no-op step costs on 8 and 32 namespace workers, and one warm command.

For each fleet size the script brings up its own testbed (holding the test fixtures' flock,
/run/specfleet-testbed.lock, so it never collides with pytest runs) and measures, over several
rounds (medians, min-max in brackets):

- cold: `Fleet(hosts)` + `play` of one no-op step (probe `true`, decides no change) on every
  host, i.e. connect (TCP + key exchange + auth) included, parallel and serial (`serial=True`);
- warm: the same `play` again on the open connections;
- per-command latency: median of N `HostConnection.run('true')` on one warm connection.

Targets: `no-op step, 32 workers, cold` under 1 s; warm per-command latency under 20 ms.

    .venv/bin/python benchmarks/fleet_overhead.py [--rounds 5] [--commands 200] [--sizes 8,32]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _session import median, spread, testbed_session

from specfleet.connection import HostConnection
from specfleet.fleet import Fleet
from specfleet.inventory import load_inventory
from specfleet.facts.system import ShellTest
from specfleet.step import Status, Step, Values


class NoOp(Step):
    name = "no-op"
    needs_root = False

    def facts(self) -> dict:
        return {"true": ShellTest("true")}

    def decide(self, facts: Values):
        return []


def one_play(fleet: Fleet) -> float:
    t0 = time.perf_counter()
    fleet.play(lambda h: [NoOp()])
    return time.perf_counter() - t0


def check_ok(fleet: Fleet, n: int) -> None:
    bad = [r for r in fleet.results if r.status is not Status.OK]
    if bad or len(fleet.results) % n:
        raise SystemExit(f"a no-op step did not come back ok: {bad[:3]}")


def measure(hosts, rounds: int, commands: int) -> dict:
    n = len(hosts)
    res = {k: [] for k in ("cold_par", "warm_par", "cold_ser", "warm_ser", "connect")}
    for _ in range(rounds):
        for serial in (False, True):
            key = "ser" if serial else "par"
            t0 = time.perf_counter()
            fleet = Fleet(hosts, serial=serial)
            fleet.play(lambda h: [NoOp()])
            res[f"cold_{key}"].append(time.perf_counter() - t0)
            res[f"warm_{key}"].append(one_play(fleet))
            check_ok(fleet, n)
            fleet.close()
    lat = []
    hc = HostConnection(hosts[0])
    t0 = time.perf_counter()
    hc.open()
    res["connect"].append(time.perf_counter() - t0)
    hc.run("true")
    for _ in range(commands):
        r = hc.run("true")
        if r.exited != 0:
            raise SystemExit(f"`true` exited {r.exited}")
        lat.append(r.duration)
    hc.close()
    res["latency"] = lat
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--commands", type=int, default=200, help="N for the per-command latency")
    ap.add_argument("--sizes", default="8,32", help="fleet sizes, comma list")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(__doc__.split("\n\n")[0])
    print(f"rounds {args.rounds} (medians, [min-max]); per-command latency over {args.commands} runs of `true`;"
          f" Fleet(forks=32) parallel vs serial=True\n")
    results = {}
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="sf-bench-") as tmp, \
                testbed_session(n, Path(tmp) / "testbed.yml") as (tb, inv_path):
            hosts = load_inventory(inv_path).select("workers")
            results[n] = r = measure(hosts, args.rounds, args.commands)
        lat = sorted(r["latency"])
        print(f"{n} workers")
        for key, label in (("cold_par", "cold, parallel"), ("warm_par", "warm, parallel"),
                           ("cold_ser", "cold, serial"), ("warm_ser", "warm, serial")):
            print(f"  no-op step, {label:<15} {median(r[key]):7.3f} s  [{spread(r[key])}]")
        print(f"  warm HostConnection.run('true'): median {median(lat) * 1000:.1f} ms, "
              f"p90 {lat[int(len(lat) * 0.9)] * 1000:.1f} ms, min {lat[0] * 1000:.1f} ms "
              f"(connect {r['connect'][0] * 1000:.0f} ms)")
    if 32 in results:
        lat_ms = median(results[32]["latency"]) * 1000
        cold = median(results[32]["cold_par"])
        print(f"\ntargets: 32 workers cold < 1 s: {'met' if cold < 1 else 'MISSED'}; "
              f"warm per-command < 20 ms: {'met' if lat_ms < 20 else 'MISSED'} ({lat_ms:.1f} ms)")
        print(f"no-op step, 32 workers, cold: {cold:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
