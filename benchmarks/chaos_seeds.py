"""More seeds of the chaos run (tests/e2e/chaos.py, issue 28) than the test's three: one 8-worker
testbed, provisioned once, one campaign per seed. Prints per seed the schedule's length, cells merged
of planned, cells lost (neither merged nor listed with a cause), merged numbers that differ from the
worker's file, items measured twice, crashes and seconds; last line: `survived N of M seeds, lost L cells`.

    .venv/bin/python benchmarks/chaos_seeds.py --seeds 20        # ~1 min per seed
    .venv/bin/python benchmarks/chaos_seeds.py --seeds 5 --first 100
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from _session import ROOT, testbed_session

sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from chaos import run_seed  # noqa: E402
from e2e_helpers import fab  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first", type=int, default=1000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sf-chaos-"))
    survived, lost_total = 0, 0
    with testbed_session(8, tmp / "testbed.yml") as (tb, inv):
        prov = fab("provision", inventory=Path(inv), runs=tmp / "runs-provision", timeout=600)
        if prov.returncode != 0:
            print(prov.stdout[-3000:], prov.stderr[-2000:])
            return 1
        for seed in range(args.first, args.first + args.seeds):
            o = run_seed(tb, tmp, seed, log=lambda s: print(s, file=sys.stderr, flush=True))
            ok = not (o.lost or o.mismatched or o.twice or o.rewritten or o.crashes)
            survived += ok
            lost_total += len(o.lost)
            print(f"seed {seed}: {len(o.schedule)} faults, merged {o.merged}/{len(o.cells)}, lost {len(o.lost)}, "
                  f"mismatched {len(o.mismatched)}, twice {len(o.twice) + len(o.rewritten)}, "
                  f"crashes {len(o.crashes)}, {o.seconds:.0f} s{'' if ok else '  FAILED'}", flush=True)
    print(f"survived {survived} of {args.seeds} seeds, lost {lost_total} cells")
    subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return 0 if survived == args.seeds else 1


if __name__ == "__main__":
    sys.exit(main())
