"""`vllm` console script of the simulated engine: `serve`, `bench serve`, `--version`."""

from __future__ import annotations

import argparse
import sys

from vllm import VERSION_STRING, __version__
from vllm.serveconfig import parse_len


def _float_or_inf(v: str) -> float:
    return float("inf") if v.strip().lower() in ("inf", "infinity") else float(v)


def serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm serve", description="Start the (SIMULATED) vLLM OpenAI-compatible "
                                "API server.")
    p.add_argument("model_tag", help="model directory (must contain config.json)")
    p.add_argument("--model", dest="model_opt", default=None, help=argparse.SUPPRESS)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--speculative-config", "-sc", default=None)
    p.add_argument("--max-model-len", type=parse_len, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", default=None)
    p.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--load-format", default="auto",
                   choices=["auto", "pt", "safetensors", "npcache", "dummy", "tensorizer", "runai_streamer",
                            "bitsandbytes", "sharded_state", "gguf", "mistral", "fastsafetensors"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--disable-log-stats", action="store_true")
    # ObservabilityConfig (vLLM >= 0.29): each response's metrics.speculative_decoding (server.py)
    p.add_argument("--per-request-spec-decode-metrics", choices=["none", "summary", "detailed"], default="none")
    # accepted and ignored (harmless on the simulated engine)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--generation-config", default="auto")
    p.add_argument("--max-num-batched-tokens", type=parse_len, default=None)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--shutdown-timeout", type=int, default=0)
    p.add_argument("--uvicorn-log-level", default="info")
    return p


def bench_serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm bench serve", description="Benchmark an online serving endpoint "
                                "(specfleet-simvllm: results are SIMULATED when the server is).")
    a = p.add_argument
    a("--backend", default="openai", choices=["openai", "openai-chat", "vllm"])
    a("--base-url", default=None)
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=8000)
    a("--endpoint", default="/v1/completions")
    a("--header", metavar="KEY=VALUE", nargs="*")
    a("--model", default=None)
    a("--served-model-name", default=None)
    a("--tokenizer", default=None)
    a("--tokenizer-mode", default="auto")
    a("--trust-remote-code", action="store_true")
    a("--skip-tokenizer-init", action="store_true")
    a("--dataset-name", default="random", choices=["spec_bench", "custom", "speed_bench", "random", "sharegpt", "hf"])
    a("--dataset-path", default=None)
    a("--num-prompts", type=int, default=1000)
    a("--spec-bench-output-len", type=int, default=256)
    a("--spec-bench-category", default=None)
    a("--custom-output-len", type=int, default=256)
    a("--speed-bench-dataset-subset", default="qualitative", choices=["qualitative", "throughput_1k", "throughput_2k",
                                                                       "throughput_8k", "throughput_16k",
                                                                       "throughput_32k"])
    a("--speed-bench-output-len", type=int, default=4096)
    a("--speed-bench-category", default=None)
    a("--skip-chat-template", action="store_true")
    a("--input-len", type=int, default=None)
    a("--output-len", type=int, default=None)
    a("--no-oversample", action="store_true")
    a("--disable-shuffle", action="store_true")
    a("--max-concurrency", type=int, default=None)
    a("--request-rate", type=_float_or_inf, default=float("inf"))
    a("--burstiness", type=float, default=1.0)
    a("--temperature", type=float, default=None)
    a("--top-p", type=float, default=None)
    a("--top-k", type=int, default=None)
    a("--min-p", type=float, default=None)
    a("--seed", type=int, default=0)
    a("--ignore-eos", action="store_true")
    a("--percentile-metrics", default=None)
    a("--metric-percentiles", default="99")
    a("--goodput", nargs="+", default=None)
    a("--save-result", action="store_true")
    a("--save-detailed", action="store_true")
    a("--append-result", action="store_true")
    a("--result-dir", default=None)
    a("--result-filename", default=None)
    a("--metadata", metavar="KEY=VALUE", nargs="*")
    a("--num-warmups", type=int, default=0)
    a("--ready-check-timeout-sec", type=int, default=0)
    a("--label", default=None)
    a("--disable-tqdm", action="store_true")
    a("--logprobs", type=int, default=None)
    a("--request-timeout-sec", type=float, default=6 * 3600,
      help="simulated-time timeout of one request (specfleet-simvllm)")
    return p


USAGE = """usage: vllm [-h] [-v] {serve,bench} ...

vLLM CLI (specfleet-simvllm: a SIMULATED vLLM %s for GPU-less testbeds)

positional arguments:
  {serve,bench}
    serve        Launch a local OpenAI-compatible API server (simulated engine).
    bench        vLLM bench subcommand (only `bench serve`).

options:
  -h, --help     show this help message and exit
  -v, --version  show program's version number and exit
""" % __version__


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if argv else 2
    if argv[0] in ("-v", "--version"):
        print(VERSION_STRING)  # never a bare vLLM version: the runner records this as the engine's
        return 0
    if argv[0] == "serve":
        args = serve_parser().parse_args(argv[1:])
        if args.model_opt and not args.model_tag:
            args.model_tag = args.model_opt
        from vllm import serve
        return serve.run(args)
    if argv[0] == "bench":
        if len(argv) < 2 or argv[1] != "serve":
            sys.stderr.write("usage: vllm bench {serve} ...\nvllm bench: error: only `vllm bench serve` is "
                             "provided by specfleet-simvllm\n")
            return 2
        args = bench_serve_parser().parse_args(argv[2:])
        from vllm.bench import serve as bench_serve
        return bench_serve.main(args)
    sys.stderr.write(USAGE.split("\n\n")[0] + "\n")
    sys.stderr.write(f"vllm: error: argument subparser: invalid choice: '{argv[0]}' (choose from 'serve', "
                     "'bench')\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
