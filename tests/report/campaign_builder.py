"""Synthetic campaigns built from the real vLLM 0.32.0 result files.

The numbers are the field report's §4.1 values (vLLM 0.28.0, Qwen3-32B, two
nodes); everything else (keys, types, arrays) is a real tool output.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32.0-cpu"

# (out tok/s, total tok/s, TPOT, TTFT, ITL, duration)
REPORT = {
    ("w1", "vanilla", 1): (21.29, 26.81, 46.94, 68.79, 46.84, 378.65),
    ("w1", "vanilla", 16): (301.19, 379.75, 51.65, 128.81, 51.57, 26.61),
    ("w1", "ngram", 1): (22.83, 28.68, 43.65, 119.81, 47.47, 357.42),
    ("w1", "ngram", 16): (286.89, 360.32, 51.77, 124.08, 56.69, 28.48),
    ("w1", "ngram_improved", 1): (25.18, 31.62, 39.56, 119.53, 47.40, 324.43),
    ("w1", "ngram_improved", 16): (308.85, 388.03, 44.73, 125.55, 54.34, 26.41),
    ("w2", "vanilla", 1): (21.25, 26.76, 47.01, 68.90, 46.91, 379.40),
    ("w2", "vanilla", 16): (306.70, 386.70, 51.74, 129.00, 51.60, 26.13),
    ("w2", "eagle3", 1): (44.76, 56.50, 22.23, 89.78, 49.47, 178.13),
    ("w2", "eagle3", 16): (562.60, 706.20, 25.33, 141.73, 57.20, 14.56),
}
# (acceptance rate %, acceptance length, drafts, accepted tokens)
SPEC = {
    ("ngram", 1): (26.0, 2.562, 429, 670),
    ("ngram_improved", 1): (22.0, 1.881, 1552, 1367),
    ("eagle3", 1): (41.5, 2.245, 3556, 4428),
    ("ngram", 16): (27.7, 2.661, 439, 729),
    ("ngram_improved", 16): (23.0, 1.922, 1589, 1465),
    ("eagle3", 16): (42.4, 2.272, 3605, 4586),
}
GPU_LOG = (
    "(EngineCore pid=1) INFO [gpu_model_runner.py:3100] Model loading took 61.0348 GiB memory and 30.1 seconds\n"
    "(EngineCore pid=1) INFO [gpu_worker.py:300] Available KV cache memory: 25.35 GiB\n"
    "(EngineCore pid=1) INFO [kv_cache_utils.py:1000] GPU KV cache size: 103,840 tokens\n"
    "(EngineCore pid=1) INFO [kv_cache_utils.py:1004] Maximum concurrency for 2,048 tokens per request: 50.70x\n"
)


def result_json(values, spec=None, conc=1, extra=None) -> dict:
    """The real sampled n-gram file (no spec keys) with numbers rewritten."""
    d = json.loads((FIXTURES / "vanilla_conc1.json").read_text())
    out, total, tpot, ttft, itl, dur = values
    d.update(output_throughput=out, total_token_throughput=total, mean_tpot_ms=tpot,
             mean_ttft_ms=ttft, mean_itl_ms=itl, duration=dur, max_concurrency=conc,
             completed=16, num_prompts=16, total_output_tokens=round(out * dur),
             total_input_tokens=round((total - out) * dur))
    if spec:
        rate, alen, drafts, acc = spec
        d.update(spec_decode_acceptance_rate=rate, spec_decode_acceptance_length=alen,
                 spec_decode_num_drafts=drafts, spec_decode_draft_tokens=round(acc * 100 / rate),
                 spec_decode_accepted_tokens=acc, spec_decode_per_position_acceptance_rates=[0.5, 0.3])
    d.update(extra or {})
    return d


def write_campaign(root: Path, data=None, scale=None, done=True, logs=True, extra=None) -> Path:
    """results/<campaign>/<host>/... ; scale = {host: factor on throughput of every run}."""
    data = data or REPORT
    for (host, cfg, conc), vals in data.items():
        hdir = root / host
        hdir.mkdir(parents=True, exist_ok=True)
        f = (scale or {}).get(host, 1.0)
        vals = (vals[0] * f, vals[1] * f, vals[2] / f, vals[3], vals[4] / f, vals[5] / f)  # a slower node: every time
        meta = {"node": host, "config": cfg, "vllm_version": "0.28.0", "plan_hash": "abc123"}
        meta.update(extra or {})
        d = result_json(vals, SPEC.get((cfg, conc)), conc, meta)
        (hdir / f"{cfg}_conc{conc}.json").write_text(json.dumps(d))
        if done:
            (hdir / f"{cfg}.done").write_text("")
        if logs:
            (hdir / f"{cfg}.server.log").write_text(GPU_LOG)
    return root


def copy_fixture(name: str, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / name, dest)
    dest.chmod(0o644)
    return dest


def matrix(out) -> dict[str, list[str]]:
    """The report's summary matrix (the verdicts): configuration -> its cells, by concurrency."""
    return {row[0]: row[1:] for row in out.model.summary.rows} if out.model.summary else {}
