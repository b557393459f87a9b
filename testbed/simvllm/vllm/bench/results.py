"""Metrics, console summary and the --save-result JSON of vLLM 0.32.0 (benchmarks/serve.py)."""

from __future__ import annotations

import math


# numpy-compatible statistics (np.mean / np.median / np.std (ddof=0) / np.percentile (linear))
def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def median(xs):
    return percentile(xs, 50)


def std(xs):
    if not xs:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def percentile(xs, p):
    if not xs:
        return 0.0
    s = sorted(xs)
    pos = (len(s) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def calculate_metrics(outputs, dur_s, percentiles):
    """outputs are RequestOutput with times already in simulated seconds."""
    actual_output_lens, tpots, ttfts, itls, e2els = [], [], [], [], []
    total_input = completed = 0
    for o in outputs:
        if o.success:
            output_len = o.output_tokens or 1
            actual_output_lens.append(output_len)
            total_input += o.prompt_len
            if output_len > 1:
                tpots.append((o.latency - o.ttft) / (output_len - 1))
            itls += o.itl
            ttfts.append(o.ttft)
            e2els.append(o.latency)
            completed += 1
        else:
            actual_output_lens.append(0)
    failed = [o for o in outputs if not o.success]
    if failed:
        print("Failed requests during benchmark run detected (capping to 10):")
        for i, o in enumerate(failed[:10]):
            print(f"Error {i}: {o.error}")
    max_tok_s, max_conc = 0.0, 0
    ok = [o for o in outputs if o.success]
    if ok:
        t0 = min(o.start_time for o in ok)
        t1 = max(o.start_time + o.latency for o in ok)
        nsec = int(math.ceil(t1 - t0)) + 1
        tok = [0.0] * nsec
        conc = [0.0] * nsec
        for o in ok:
            times = [o.start_time + o.ttft]
            cur = times[0]
            for gap in o.itl:
                cur += gap
                times.append(cur)
            for t in times:
                b = int(t - t0)
                if 0 <= b < nsec:
                    tok[b] += 1
            s = int(o.start_time - t0)
            e = int(math.ceil(o.start_time + o.latency - t0))
            for sec in range(s, min(nsec, e)):
                conc[sec] += 1
        idx = max(range(nsec), key=lambda i: tok[i])
        max_tok_s, max_conc = float(tok[idx]), int(conc[idx])
    total_output = sum(actual_output_lens)
    m = {
        "completed": completed, "failed": len(failed), "total_input": total_input,
        "total_output": total_output, "request_throughput": completed / dur_s,
        "output_throughput": total_output / dur_s,
        "total_token_throughput": (total_input + total_output) / dur_s,
        "max_output_tokens_per_s": max_tok_s, "max_concurrent_requests": max_conc,
    }
    for name, vals in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        m[f"mean_{name}_ms"] = mean(vals) * 1000
        m[f"std_{name}_ms"] = std(vals) * 1000
        m[f"median_{name}_ms"] = median(vals) * 1000
        m[f"percentiles_{name}_ms"] = [(p, percentile(vals, p) * 1000) for p in percentiles]
    return m, actual_output_lens


def line(label, value, fmt="{:<10.2f}"):
    print(("{:<40} " + fmt).format(label, value))


def build_result(outputs, dur_s, m, actual_output_lens, max_concurrency, selected_metrics, percentiles,
                 spec_stats, queue_times_ok):
    """benchmark()'s result dict, printing vLLM's summary on the way."""
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    line("Successful requests:", m["completed"], "{:<10}")
    line("Failed requests:", m["failed"], "{:<10}")
    if max_concurrency is not None:
        line("Maximum request concurrency:", max_concurrency, "{:<10}")
    line("Benchmark duration (s):", dur_s)
    line("Total input tokens:", m["total_input"], "{:<10}")
    line("Total generated tokens:", m["total_output"], "{:<10}")
    line("Request throughput (req/s):", m["request_throughput"])
    line("Output token throughput (tok/s):", m["output_throughput"])
    line("Peak output token throughput (tok/s):", m["max_output_tokens_per_s"])
    line("Peak concurrent requests:", m["max_concurrent_requests"])
    line("Total token throughput (tok/s):", m["total_token_throughput"])
    result = {
        "duration": dur_s, "completed": m["completed"], "failed": m["failed"],
        "total_input_tokens": m["total_input"], "total_output_tokens": m["total_output"],
        "request_throughput": m["request_throughput"], "request_goodput": None,
        "output_throughput": m["output_throughput"], "total_token_throughput": m["total_token_throughput"],
        "input_lens": [o.prompt_len for o in outputs], "output_lens": actual_output_lens,
        "ttfts": [o.ttft for o in outputs], "itls": [o.itl for o in outputs],
        "latencies": [o.latency for o in outputs], "start_times": [o.start_time for o in outputs],
        "queue_times": [o.client_queue_time for o in outputs],
        "generated_texts": [o.generated_text for o in outputs], "errors": [o.error for o in outputs],
        "max_output_tokens_per_s": m["max_output_tokens_per_s"],
        "max_concurrent_requests": m["max_concurrent_requests"], "rtfx": 0.0,
    }
    if spec_stats is not None:
        result["spec_decode_acceptance_rate"] = spec_stats["acceptance_rate"]
        result["spec_decode_acceptance_length"] = spec_stats["acceptance_length"]
        result["spec_decode_num_drafts"] = int(spec_stats["num_drafts"])
        result["spec_decode_draft_tokens"] = int(spec_stats["draft_tokens"])
        result["spec_decode_accepted_tokens"] = int(spec_stats["accepted_tokens"])
        result["spec_decode_per_position_acceptance_rates"] = spec_stats["per_position_acceptance_rates"]

    def one(attr, name, header, values=None):
        if attr not in selected_metrics:
            return
        if values is None:
            mu, med, sd = m[f"mean_{attr}_ms"], m[f"median_{attr}_ms"], m[f"std_{attr}_ms"]
            pcts = m[f"percentiles_{attr}_ms"]
        else:
            mu, med, sd = mean(values) * 1000, median(values) * 1000, std(values) * 1000
            pcts = [(p, percentile(values, p) * 1000) for p in percentiles]
        print("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        line(f"Mean {name} (ms):", mu)
        line(f"Median {name} (ms):", med)
        result[f"mean_{attr}_ms"] = mu
        result[f"median_{attr}_ms"] = med
        result[f"std_{attr}_ms"] = sd
        for p, value in pcts:
            word = str(int(p)) if int(p) == p else str(p)
            line(f"P{word} {name} (ms):", value)
            result[f"p{word}_{attr}_ms"] = value

    one("ttft", "TTFT", "Time to First Token")
    one("tpot", "TPOT", "Time per Output Token (excl. 1st token)")
    one("itl", "ITL", "Inter-token Latency")
    one("e2el", "E2EL", "End-to-end Latency")
    if queue_times_ok is not None:
        one("client_queue_time", "Client Queue Time", "Client-side Queueing", queue_times_ok)
    if spec_stats is not None:
        print("{s:{c}^{n}}".format(s="Speculative Decoding", n=50, c="-"))
        line("Acceptance rate (%):", spec_stats["acceptance_rate"])
        line("Acceptance length:", spec_stats["acceptance_length"])
        line("Drafts:", int(spec_stats["num_drafts"]), "{:<10}")
        line("Draft tokens:", int(spec_stats["draft_tokens"]), "{:<10}")
        line("Accepted tokens:", int(spec_stats["accepted_tokens"]), "{:<10}")
        if spec_stats["per_position_acceptance_rates"]:
            print("Per-position acceptance (%):")
            for i, rate in enumerate(spec_stats["per_position_acceptance_rates"]):
                line(f"  Position {i}:", rate * 100)
    print("=" * 50)
    return result


def spec_decode_stats(before, after):
    """Δ of the scraped counters -> vLLM's spec_decode_* stats (None when Δdraft_tokens == 0)."""
    if before is None or after is None:
        return None
    d_drafts = after["num_drafts"] - before["num_drafts"]
    d_tokens = after["num_draft_tokens"] - before["num_draft_tokens"]
    d_acc = after["num_accepted_tokens"] - before["num_accepted_tokens"]
    per_pos = []
    if d_drafts > 0:
        for pos in sorted(set(before["per_pos"]) | set(after["per_pos"])):
            b = before["per_pos"].get(pos, 0)
            per_pos.append((after["per_pos"].get(pos, b) - b) / d_drafts)
    if d_tokens <= 0:
        return None
    return {"num_drafts": d_drafts, "draft_tokens": d_tokens, "accepted_tokens": d_acc,
            "acceptance_rate": d_acc / d_tokens * 100,
            "acceptance_length": 1 + d_acc / d_drafts if d_drafts > 0 else 0.0,
            "per_position_acceptance_rates": per_pos}
