"""Campaigns as `fab collect` leaves them (plan.json included), from the real vLLM 0.32.0 result file with
the field report's numbers: three repeats per cell with seeded noise, the nodes' baselines equal so each
side's gate passes. Used by test_compare.py and test_assertions.py."""
from __future__ import annotations

import copy
import json
import random
from pathlib import Path

from campaign_builder import REPORT, SPEC, result_json
from specfleet.plan import parse_plan
from specfleet.report.scan.plan_snapshot import write_snapshot
from specfleet.yamlfile import load_yaml

ROOT = Path(__file__).resolve().parents[2]


def plan_raw(**changes) -> dict:
    raw = load_yaml(ROOT / "plans" / "demo.yml")
    raw["benchmark"]["repeat"] = 3
    raw["assertions"] = [{"config": "eagle3", "concurrency": 16, "metric": "speedup", "min": 1.7}]
    for k, v in changes.items():
        d = raw
        *head, last = k.split(".")
        for h in head:
            d = d[h]
        d[last] = v
    return raw


def campaign(root: Path, raw: dict, seed: int, scale: dict | None = None, noise: float = 0.002,
             vllm: str = "0.31.0", repeats: int = 3, fields: dict | None = None) -> Path:
    """results/<campaign>/<host>/<cfg>_conc<N>_r<K>.json with plan.json, as fab collect leaves it.
    scale: {config: factor on every speed}; fields: {(config, conc): {result key: factor}} on one key
    alone (a throughput halved at equal TPOT); noise: the run-to-run CV, TTFT's included."""
    plan = parse_plan(copy.deepcopy(raw), ROOT / "plans" / "demo.yml")
    d = root / plan.campaign
    rnd = random.Random(seed)
    for (host, cfg, conc), vals in REPORT.items():
        vals = REPORT[("w1", cfg, conc)] if cfg == "vanilla" else vals
        h = d / host
        h.mkdir(parents=True, exist_ok=True)
        for rep in range(1, repeats + 1):
            f = (scale or {}).get(cfg, 1.0) * (1 + rnd.gauss(0, noise))
            v = (vals[0] * f, vals[1] * f, vals[2] / f, vals[3] * (1 + rnd.gauss(0, noise)), vals[4], vals[5] / f)
            for k, x in (fields or {}).get((cfg, conc), {}).items():
                i = ("output_throughput", "total_token_throughput", "mean_tpot_ms", "mean_ttft_ms",
                     "mean_itl_ms", "duration").index(k)
                v = (*v[:i], v[i] * x, *v[i + 1:])
            meta = {"node": host, "config": cfg, "vllm_version": vllm, "plan_hash": plan.plan_hash(),
                    "repeat": str(rep), "repeat_isolation": plan.benchmark.repeat_isolation}  # as the runner writes
            (h / f"{cfg}_conc{conc}_r{rep}.json").write_text(json.dumps(result_json(v, SPEC.get((cfg, conc)), conc, meta)))
        (h / f"{cfg}.done").write_text("")
    write_snapshot(d, plan)
    return d
