#!/usr/bin/env python3
"""Placing a dataset on 8 namespace workers: the real Spec-Bench file (698 KB), cold and unchanged.

The script brings up its own testbed (holding the test fixtures' flock,
/run/specfleet-testbed.lock) and times, over several rounds (medians, min-max in brackets), one
`Fleet(hosts)` + `play` of a FileContent step whose source is the file (as `fab bench` places a
plan's dataset), connect included:

- cold: the file is absent on every worker (removed before the round, without SSH): the
  payload streams over each connection's stdin, is checked (size, sha256) and renamed into place;
- unchanged: the file is already there: the batched probe's sha256 says so, nothing is sent.

Each cold round must change every worker and leave the right checksum there; each unchanged
round must change nothing. `--big-mb N` also times a generated N MB file the same way.

    .venv/bin/python benchmarks/payload_placement.py [--rounds 5] [--workers 8] [--big-mb 50]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
from pathlib import Path

from _session import median, spread, testbed_session

from specfleet.fleet import Fleet
from specfleet.inventory import load_inventory
from specfleet.step import Status
from specfleet.steps.files import FileContent

# the full Spec-Bench file is never committed: in shared/ beside the checkout (tests/shared_data.py)
SPEC_BENCH = Path(__file__).resolve().parents[1].parent / "shared/datasets/spec_bench/question.jsonl"
TARGET_DIR = "/var/lib/specfleet/datasets/bench-payload"


def one_play(hosts, source: Path, want: Status) -> float:
    target = f"{TARGET_DIR}/{source.name}"
    t0 = time.perf_counter()
    fleet = Fleet(hosts)
    try:
        fleet.play(lambda h: [FileContent(target, source=source)])
    finally:
        fleet.close()
    took = time.perf_counter() - t0
    bad = [(r.host, r.status.value, r.message) for r in fleet.results if r.status is not want]
    if bad or len(fleet.results) != len(hosts):
        raise SystemExit(f"expected every host {want.value}: {bad[:3]}")
    return took


def measure(tb, hosts, source: Path, rounds: int) -> dict[str, list[float]]:
    want = hashlib.sha256(source.read_bytes()).hexdigest()
    res: dict[str, list[float]] = {"cold": [], "unchanged": []}
    for _ in range(rounds):
        for h in hosts:
            tb.exec(h.name, ["rm", "-rf", TARGET_DIR])
        res["cold"].append(one_play(hosts, source, Status.CHANGED))
        for h in hosts:
            got = tb.exec(h.name, ["sha256sum", f"{TARGET_DIR}/{source.name}"]).stdout.split()[:1]
            if got != [want]:
                raise SystemExit(f"{h.name}: wrong content after placing {source} ({got})")
        res["unchanged"].append(one_play(hosts, source, Status.OK))
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--big-mb", type=int, default=0, help="also a generated file of this many MB (0: no)")
    args = ap.parse_args()
    if not SPEC_BENCH.is_file():
        raise SystemExit(f"{SPEC_BENCH} is absent: this benchmark needs the real Spec-Bench file")
    print(__doc__.split("\n\n")[0])
    print(f"rounds {args.rounds} (medians, [min-max]); Fleet(forks=32), connect included\n")
    with tempfile.TemporaryDirectory(prefix="sf-bench-") as tmp, \
            testbed_session(args.workers, Path(tmp) / "testbed.yml") as (tb, inv_path):
        hosts = load_inventory(inv_path).select("workers")
        files = [SPEC_BENCH]
        if args.big_mb:
            big = Path(tmp) / "big.bin"
            with open(big, "wb") as f:
                for _ in range(args.big_mb):
                    f.write(os.urandom(1 << 20))
            files.append(big)
        results = {}
        for source in files:
            results[source] = r = measure(tb, hosts, source, args.rounds)
            size = source.stat().st_size
            print(f"{source.name} ({size:,} bytes) on {len(hosts)} workers")
            for key in ("cold", "unchanged"):
                print(f"  {key:<10} {median(r[key]):7.3f} s  [{spread(r[key])}]")
    r = results[SPEC_BENCH]
    print(f"\nplacing the 698 KB file on {len(hosts)} workers: cold {median(r['cold']):.3f} s, "
          f"unchanged {median(r['unchanged']):.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
