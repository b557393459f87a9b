"""`python3 runner.pyz --spec run.json` runs the runner; `python runner.pyz fitcheck ...` the fit check,
`python runner.pyz acceptance ...` the untimed per-request acceptance pass (acceptance.py);
`python3 -S runner.pyz slurm-step check|run|site-check ...` one Slurm job step on a node (slurm_step.py)."""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fitcheck"]:
        from .fitcheck import main as fitcheck
        return fitcheck(argv[1:])
    if argv[:1] == ["acceptance"]:
        from .acceptance import main as acceptance
        return acceptance(argv[1:])
    if argv[:1] == ["slurm-step"]:
        from .slurm_step import main as slurm_step
        return slurm_step(argv[1:])
    from .runner import main as runner
    return runner(argv)


if __name__ == "__main__":
    sys.exit(main())
