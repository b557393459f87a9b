#!/usr/bin/env python3
"""specfleet's report of a real-GPU run, from the runner's result folder the device returned.

    .venv/bin/python -m testbed.realgpu.report RUN_DIR [RUN_DIR ...] OUT_ROOT [--env env.txt] [--weights-gib G]

RUN_DIR is the runner's `<campaign>/<host>/` folder (state.json, `<config>_conc<N>.json`, server
logs, done markers), e.g. unpacked from the device's results.tar.gz. It is copied to
OUT_ROOT/<campaign>/<host>/ and merged there by specfleet's own report code
(specfleet.report.report_campaign), unchanged. What this tier adds:

- the GPU's memory bandwidth, looked up by the GPU name in the run's provenance
  (specfleet.report.tables.diagnosis.bandwidth_of), so the decode bound (weights / bandwidth) is computed without a flag;
- for runs made before device.sh stamped the provenance into the result files (the fixtures of
  2026-12-01), --env takes GPU, driver and torch from that run's env.txt (nvidia-smi's CSV and
  torch's version line, read on the device) into the copied state.json's `facts`;
- a "Real-GPU run" section appended to report.md: what the numbers are (real GPU, not simulated),
  the model's weights (random or real: random weights make timings meaningful, acceptance not),
  and the decode bound against the measured TPOT.

Degenerate and near-zero acceptance are flagged by the core's conclusions (specfleet.report.tables.measures
.acceptance_flag), as in every `fab report`; nothing here judges acceptance.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from specfleet.report.tables.diagnosis import bandwidth_of  # noqa: E402
from testbed.realgpu.specs import ENGINE  # noqa: E402

#: vanilla below this fraction of the decode bound is not memory-bound.
FAR_FROM_BOUND = 0.2
#: A model directory with this README marker was written by models.py `dummy` (random weights).
RANDOM_WEIGHTS_HINTS = ("dummy", "--load-format")
SECTION = "## Real-GPU run"


def facts_from_env(text: str) -> dict[str, str]:
    """gpu, driver, torch_version, cuda_version from device.sh's env.txt."""
    facts: dict[str, str] = {}
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("name, driver_version") and i + 1 < len(lines):
            parts = [p.strip() for p in lines[i + 1].split(",")]
            if len(parts) >= 2:
                facts["gpu"], facts["driver"] = parts[0], parts[1]
                facts["engine"] = ENGINE  # env.txt is written by device.sh, on the device
        m = re.match(r"^torch (\S+) (\S+) (True|False)$", ln)
        if m:
            facts["torch_version"], facts["cuda_version"] = m.group(1), m.group(2)
    if "gpu" not in facts:
        raise ValueError("no nvidia-smi 'name, driver_version, ...' header and row in the env file")
    return facts


def copy_run(run_dir: Path, out_root: Path, facts: dict[str, str] | None = None) -> Path:
    """Copy the runner's folder to OUT_ROOT/<campaign>/<host>/; returns the campaign folder."""
    state = json.loads((run_dir / "state.json").read_text())
    camp, host = state["campaign"], state["host"]
    dst = out_root / camp / host
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for p in sorted(run_dir.iterdir()):
        if p.is_file() and (p.suffix in (".json", ".log", ".done")):
            shutil.copy2(p, dst / p.name)
    if facts:
        # at the state's top level, where the runner writes what it knows of its host (the report reads
        # that one shape); what the runner recorded itself wins
        state.update({k: v for k, v in facts.items() if k not in state})
        (dst / "state.json").write_text(json.dumps(state, indent=2) + "\n")
    return out_root / camp


def gpu_of(camp_dir: Path) -> str | None:
    """The GPU name the run's files record (result metadata first, then the runner's state)."""
    for p in sorted(q for q in camp_dir.glob("*/*_conc*.json") if not q.name.endswith(".record.json")):
        g = json.loads(p.read_text()).get("gpu")
        if g:
            return str(g)
    for p in camp_dir.glob("*/state.json"):
        g = json.loads(p.read_text()).get("gpu")
        if g:
            return str(g)
    return None


def random_weights(camp_dir: Path) -> bool:
    """Whether the servers ran with --load-format dummy (random weights), from the server logs."""
    for log in camp_dir.glob("*/*.server.log"):
        head = log.read_text(errors="replace")[:4000]
        if re.search(r"--load-format[ =]dummy|load_format='?dummy|load_format=<LoadFormats?\.DUMMY", head):
            return True
    return False


def gpu_section(rows: list[dict], gpu: str | None, bandwidth: float | None, bound_ms: float | None,
                weights_gib: float | None, random: bool) -> str:
    lines = [SECTION, ""]
    lines.append(f"Real GPU, not simulated: {gpu or 'GPU name not recorded'}; real CUDA vLLM driven by "
                 "specfleet's worker-side runner (testbed/realgpu, docs/engines-gpu.md).")
    lines.append("")
    if random:
        lines.append("Weights: RANDOM (`--load-format dummy`, a real model's shape): timings, memory and "
                     "orchestration are meaningful; acceptance rates and speedups of speculative decoding "
                     "are not (greedy decoding of random weights loops).")
    else:
        lines.append("Weights: real (no `--load-format dummy` in the server logs).")
    lines.append("")
    if bandwidth and bound_ms:
        lines.append(f"Decode bound: {weights_gib:g} GiB of weights / {bandwidth:,.0f} GB/s ({gpu}, vendor "
                     f"figure) = {bound_ms:.2f} ms per token (see 'Memory-bandwidth bound' above).")
        base = [r for r in rows if r.get("config") == "vanilla" and isinstance(r.get("tpot_ms"), (int, float))
                and r["tpot_ms"] > 0]
        for r in base:
            frac = bound_ms / r["tpot_ms"]
            lines.append(f"vanilla at concurrency {r['concurrency']}: TPOT {r['tpot_ms']:.2f} ms = {frac:.2f} of the "
                         "bound" + (": decode is far from memory-bound (launch- or CPU-bound), so the field "
                                    "report's condition for a speculative-decoding gain does not hold"
                                    if frac < FAR_FROM_BOUND else "") + ".")
    else:
        lines.append(f"Decode bound not computed: no bandwidth known for GPU {gpu!r} or no weights size.")
    lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def report(run_dir: Path | list[Path], out_root: Path, env: Path | None = None, weights_gib: float | None = None,
           quiet: bool = True):
    """`run_dir`: one runner folder, or several of one campaign (the two-GPU run: one per worker,
    merged after specfleet's equivalence gate on their baselines)."""
    from specfleet.report import report_campaign
    facts = facts_from_env(env.read_text()) if env else None
    runs = run_dir if isinstance(run_dir, list) else [run_dir]
    camps = {copy_run(r, out_root, facts) for r in runs}
    if len(camps) != 1:
        raise ValueError(f"the run folders belong to different campaigns: {sorted(c.name for c in camps)}")
    camp_dir = camps.pop()
    gpu = gpu_of(camp_dir)
    known = bandwidth_of(gpu)  # the one table: specfleet.report.tables.diagnosis.BANDWIDTH_GBPS
    bandwidth = known[0] if known else None
    outcome = report_campaign(camp_dir, gpu_bandwidth_gbps=bandwidth, weights_gib=weights_gib, quiet=quiet)
    if outcome.merged:
        rows = json.loads((camp_dir / "merged.json").read_text())
        bound = getattr(outcome.tables, "min_tpot_ms", None) if outcome.tables is not None else None
        # the weights the bound used (given, or read from the baseline's server log by the core)
        w = bound / 1000.0 * bandwidth * 1e9 / 2 ** 30 if bound and bandwidth else weights_gib
        section = gpu_section(rows, gpu, bandwidth, bound, round(w, 2) if w else None, random_weights(camp_dir))
        md = camp_dir / "report.md"
        md.write_text(md.read_text() + "\n" + section)
    return outcome, camp_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, nargs="+", help="the runner folder(s) of one campaign")
    ap.add_argument("out_root", type=Path)
    ap.add_argument("--env", type=Path, help="env.txt of the same device run (GPU, driver, torch)")
    ap.add_argument("--weights-gib", type=float)
    a = ap.parse_args(argv)
    try:
        outcome, camp_dir = report(list(a.run_dir), a.out_root, a.env, a.weights_gib, quiet=False)
    except (OSError, ValueError, KeyError) as e:
        print(f"realgpu report: {a.run_dir}: {e}", file=sys.stderr)
        return 1
    if not outcome.merged:
        print(f"realgpu report: {camp_dir}: not merged: {outcome.error}", file=sys.stderr)
        return 1
    print(camp_dir / "report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
