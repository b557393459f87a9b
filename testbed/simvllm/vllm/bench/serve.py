"""`vllm bench serve` (main_async + benchmark of vLLM 0.32.0, on threads instead of asyncio).

All times are measured on the wall clock and divided by the time scale, so a run against the
simulated server reports "simulated GPU time" comparable with the field report (the result file
says so: "simulated": true, "simulated_time_scale": <scale>).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from vllm import ENGINE_NAME, VERSION_STRING, simenv
from vllm.bench import client, results
from vllm.bench.dataset import get_samples
from vllm.metrics import parse_spec_decode
from vllm.textsim import count_tokens


def scrape(base_url: str) -> dict | None:
    try:
        status, body = client.http_get(base_url + "/metrics", timeout=10)
    except OSError:
        return None
    if status != 200:
        return None
    return parse_spec_decode(body.decode("utf-8", "replace"))


def check_tokenizer(tokenizer_id: str) -> None:
    """The real client loads an HF tokenizer; air-gapped, only a local directory works."""
    if os.path.isdir(tokenizer_id) and any(os.path.exists(os.path.join(tokenizer_id, f)) for f in
                                           ("tokenizer.json", "tokenizer_config.json", "config.json")):
        return
    raise OSError(
        f"We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
        f"cached files. Check your internet connection or see how to run the library in offline mode at "
        f"'https://huggingface.co/docs/transformers/installation#offline-mode'. (tokenizer '{tokenizer_id}' "
        f"is not a local model directory; pass --tokenizer <model dir>)")


def compute_filename(args, model_id: str, label: str | None, dt: str) -> str | None:
    if not (args.save_result or args.append_result):
        return None
    conc = f"-concurrency{args.max_concurrency}" if args.max_concurrency is not None else ""
    name = f"{label or args.backend}-{args.request_rate}qps{conc}-{model_id.split('/')[-1]}-{dt}.json"
    if args.result_filename:
        name = args.result_filename
    if args.result_dir:
        os.makedirs(args.result_dir, exist_ok=True)
        name = os.path.join(args.result_dir, name)
    return name


def benchmark(args, api_url, base_url, model_id, requests, extra_body, scale, selected, percentiles):
    chat = args.backend == "openai-chat"
    timeout = args.request_timeout_sec * scale + 30

    def inp(r):
        return client.RequestInput(r.prompt, api_url, r.prompt_len, r.expected_output_len, model_id,
                                   dict(extra_body), args.ignore_eos, args.logprobs, timeout, r.category)

    if args.ready_check_timeout_sec > 0:
        print("Starting initial single prompt test run...")
        deadline = time.monotonic() + args.ready_check_timeout_sec
        while True:
            out = client.request(inp(requests[0]), chat)
            if out.success or time.monotonic() > deadline:
                break
            time.sleep(1)
        if not out.success:
            raise ValueError("Initial test run failed - Please make sure benchmark arguments are correctly "
                             f"specified. Error: {out.error}")
        print("Initial test run completed.")
    else:
        print("Skipping endpoint ready check.")
    if args.num_warmups > 0:
        print(f"Warming up with {args.num_warmups} requests...")
        with ThreadPoolExecutor(max_workers=args.max_concurrency or args.num_warmups) as ex:
            list(ex.map(lambda _: client.request(inp(requests[0]), chat), range(args.num_warmups)))
        print("Warmup run completed.")
    print("Starting main benchmark run...")
    print(f"Traffic request rate: {args.request_rate}")
    dist = "Poisson process" if args.burstiness == 1.0 else "Gamma distribution"
    print(f"Burstiness factor: {args.burstiness} ({dist})")
    print(f"Maximum request concurrency: {args.max_concurrency}")
    before = scrape(base_url)

    workers = args.max_concurrency or len(requests)
    outputs = [None] * len(requests)
    lock = threading.Lock()
    done = [0]

    # the first wave (all requests of a concurrency-N client at t=0) reaches a GPU host within µs;
    # so does each next request when one finishes: the simulated engine is told both (the wave's
    # size; how many requests follow) so it batches them as that host would (engine.py)
    closed = args.request_rate == float("inf")
    first_wave = min(workers, len(requests)) if closed else 0

    def run_one(i, arrival):
        req = inp(requests[i])
        if i < first_wave:
            req.burst = first_wave
        if closed:
            req.pending = len(requests) - i - 1
        o = client.request(req, chat)
        o.client_queue_time = o.start_time - arrival
        outputs[i] = o
        with lock:
            done[0] += 1

    rng = random.Random(args.seed)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        # start every client thread and its keep-alive connection before the clock starts (aiohttp
        # has no per-request thread start-up cost; here it would be amplified by 1/time-scale)
        n_warm = max(1, min(workers, len(requests)))
        barrier = threading.Barrier(n_warm)

        def warm(_):
            try:
                client.prepare(api_url, timeout)
            finally:
                try:
                    barrier.wait(timeout=30)
                except threading.BrokenBarrierError:
                    pass
        list(ex.map(warm, range(n_warm)))
        t_start = time.perf_counter()
        delay = 0.0
        for i in range(len(requests)):
            if args.request_rate != float("inf"):
                theta = 1.0 / (args.request_rate * args.burstiness)
                delay += rng.gammavariate(args.burstiness, theta)
                wait = t_start + delay * scale - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            ex.submit(run_one, i, time.perf_counter())
    duration_wall = time.perf_counter() - t_start
    after = scrape(base_url)

    # -> simulated seconds: the engine's clock where the server sent it, else wall / scale
    for o in outputs:
        o.client_queue_time /= scale
        if o.simulated_clock and o.success:
            o.start_time = o.sim_start
        else:
            o.latency /= scale
            o.ttft /= scale
            o.itl = [x / scale for x in o.itl]
            o.start_time /= scale
        if o.success and not o.output_tokens:
            o.output_tokens = count_tokens(o.generated_text)
    dur = duration_wall / scale
    timed = [o for o in outputs if o.simulated_clock and o.success]
    if timed:
        dur = max(o.start_time + o.latency for o in timed) - min(o.start_time for o in timed)
    m, lens = results.calculate_metrics(outputs, dur, percentiles)
    spec = results.spec_decode_stats(before, after)
    qt = [o.client_queue_time for o in outputs if o.success] if args.max_concurrency is not None else None
    return results.build_result(outputs, dur, m, lens, args.max_concurrency, selected, percentiles, spec, qt)


def main(args: argparse.Namespace) -> int:
    print(args)
    if args.max_concurrency is not None and args.max_concurrency <= 0:
        raise SystemExit("ValueError: --max-concurrency must be greater than 0")
    random.seed(args.seed)
    # many I/O threads: keep wall receive timestamps close to arrival (they matter only against a
    # server without the simulated clock); at 1 ms hundreds of threads do not thrash the GIL
    sys.setswitchinterval(0.001)
    scale = simenv.time_scale()
    if args.base_url is not None:
        base_url = args.base_url.rstrip("/")
    else:
        base_url = f"http://{args.host}:{args.port}"
    api_url = base_url + args.endpoint
    try:
        if args.model is None:
            print("Model not specified, fetching first model from server...")
            status, body = client.http_get(base_url + "/v1/models")
            first = json.loads(body)["data"][0]
            model_id = first["id"]
            print(f"First model name: {model_id}, first model id: {model_id}")
        else:
            model_id = args.model
        tokenizer_id = args.tokenizer if args.tokenizer is not None else model_id
        check_tokenizer(tokenizer_id)
        if args.output_len is not None:
            args.spec_bench_output_len = args.output_len
            args.custom_output_len = args.output_len
        requests = get_samples(args)
    except (OSError, ValueError, KeyError, IndexError) as e:
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if not requests:
        print("AssertionError: No requests provided.", file=sys.stderr)
        return 1
    sampling = {k: v for k, v in {"top_p": args.top_p, "top_k": args.top_k, "min_p": args.min_p,
                                  "temperature": args.temperature}.items() if v is not None}
    if "temperature" not in sampling:
        print("WARNING: vllm bench serve no longer sets temperature==0 (greedy) in requests by default. The "
              "default will be determined on the server side and can be model/API specific. For the old "
              "behavior, include --temperature=0.")
    selected = (args.percentile_metrics or "ttft,tpot,itl").split(",")
    percentiles = [float(p) for p in args.metric_percentiles.split(",")]
    print(f"NOTE: specfleet-simvllm client; times are divided by the time scale {scale} (simulated GPU time)")
    result = benchmark(args, api_url, base_url, model_id, requests, sampling, scale, selected, percentiles)

    dt = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    rj = {"date": dt, "endpoint_type": args.backend, "backend": args.backend, "label": args.label,
          "model_id": model_id, "tokenizer_id": tokenizer_id, "num_prompts": args.num_prompts}
    for item in args.metadata or []:
        if "=" not in item:
            raise SystemExit("ValueError: Invalid metadata format. Please use KEY=VALUE format.")
        k, v = item.split("=", 1)
        rj[k.strip()] = v.strip()
    rj["request_rate"] = args.request_rate if args.request_rate < float("inf") else "inf"
    rj["burstiness"] = args.burstiness
    rj["max_concurrency"] = args.max_concurrency
    rj = {**rj, **result}
    if args.goodput:  # vLLM's --goodput: requests meeting every limit (ms) per second of the run
        try:
            rj["request_goodput"] = request_goodput(args.goodput, result)
        except ValueError as e:
            print(f"ValueError: {e}", file=sys.stderr)
            return 1
    if not args.save_detailed:
        for f in ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors"):
            rj.pop(f, None)
    rj["simulated"] = True
    rj["engine"] = ENGINE_NAME
    rj["engine_version"] = VERSION_STRING
    rj["simulated_time_scale"] = scale
    name = compute_filename(args, model_id, args.label, dt)
    if name:
        with open(name, mode="a+" if args.append_result else "w", encoding="utf-8") as f:
            if args.append_result and f.tell() != 0:
                f.write("\n")
            json.dump(rj, f)
    return 0


def request_goodput(specs: list[str], result: dict) -> float:
    """vLLM 0.32.0's rule (benchmarks/serve.py, parse_goodput / calculate_metrics): `KEY:VALUE` pairs in ms
    with KEY in ttft, tpot, e2el; a successful request is good when each of its figures is <= the limit
    (TPOT = (latency - TTFT) / (output tokens - 1), 0 for one token)."""
    limits = {}
    for spec in specs:
        key, _, val = spec.partition(":")
        if key not in ("ttft", "tpot", "e2el") or not val:
            raise ValueError(f"Invalid metric name found, {key}: {val}. The service level objective name "
                             "should be one of ['ttft', 'tpot', 'e2el'].")
        limits[key] = float(val) / 1000.0
    good = 0
    for ttft, lat, n, err in zip(result["ttfts"], result["latencies"], result["output_lens"], result["errors"]):
        if err or not n:
            continue
        got = {"ttft": ttft, "tpot": (lat - ttft) / (n - 1) if n > 1 else 0.0, "e2el": lat}
        good += all(got[k] <= v for k, v in limits.items())
    return good / result["duration"]

