"""`vllm serve` of the simulated engine: the API server process and its EngineCore child."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading

from vllm import VERSION_STRING, __version__, calibration, simenv
from vllm.engine import Engine
from vllm.metrics import Metrics
from vllm.server import App, activate, make_server
from vllm.serveconfig import (ConfigError, kv_bytes_per_token, load_model_config, parse_speculative_config,
                              spec_repr, weights_gib)

ROLE = "APIServer"


def log(level: str, src: str, msg: str) -> None:
    simenv.log(ROLE, level, src, msg)


def fail(kind: str, msg: str, code: int = 1) -> int:
    simenv.raw("Traceback (most recent call last):\n"
               '  File "/vllm-venv/bin/vllm", line 10, in <module>\n    sys.exit(main())\n'
               f"{kind}: {msg}", sys.stderr)
    return code


def banner(model: str) -> None:
    for line in ("", "       █     █     █▄   ▄█",
                 f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {__version__}",
                 f"  █▄█▀ █     █     █     █  model   {model}",
                 "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀", ""):
        log("INFO", "api_utils.py:347", line)


def start_enginecore(cfg: dict) -> tuple[subprocess.Popen, int]:
    r, w = os.pipe()
    cfg = dict(cfg, ready_fd=w)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = (f"exec -a VLLM::EngineCore {shlex.quote(sys.executable)} -m vllm._enginecore "
           f"{shlex.quote(json.dumps(cfg))}")
    proc = subprocess.Popen(["/bin/bash", "-c", cmd], pass_fds=(w,), env=env, stdin=subprocess.DEVNULL)
    os.close(w)
    return proc, r


def wait_ready(proc: subprocess.Popen, fd: int) -> dict | None:
    buf = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except InterruptedError:
            continue
        if not chunk:
            break
        buf += chunk
        if b"\n" in buf:
            break
    os.close(fd)
    if not buf:
        return None
    try:
        return json.loads(buf.decode().splitlines()[0])
    except ValueError:
        return None


def gpus_for(tp: int) -> list[dict]:
    """The GPUs this server uses: the first `tp` that CUDA_VISIBLE_DEVICES leaves visible.

    Like vLLM, TP > 1 with fewer visible GPUs fails in the API server's config validation; TP = 1
    with none visible fails later, in the EngineCore (torch finds no CUDA device)."""
    if tp < 1:
        raise ConfigError("pydantic_core._pydantic_core.ValidationError", "1 validation error for "
                          f"ParallelConfig\n  Value error, tensor_parallel_size must be >= 1, got {tp}")
    visible = simenv.visible_gpus(simenv.gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    if tp > 1 and len(visible) < tp:
        raise ConfigError("pydantic_core._pydantic_core.ValidationError", (
            "1 validation error for ParallelConfig\n"
            f"  Value error, World size ({tp}) is larger than the number of available GPUs ({len(visible)}) "
            "in this node. If this is intentional and you are using:\n"
            "- ray, set '--distributed-executor-backend ray'.\n"
            "- multiprocessing, set '--nnodes' appropriately. [type=value_error]"))
    return visible[:tp]


def run(args) -> int:
    host = simenv.host_config()
    model = args.model_tag
    served = (args.served_model_name or [model])[0]
    simenv.raw(f"SIMULATED: {VERSION_STRING}, specfleet-simvllm: no GPU, no model weights are used; every "
               f"latency and acceptance number comes from a documented model (vllm/model.py) "
               f"(time scale {simenv.time_scale()}, host speed_factor {host['speed_factor']}, "
               f"noise {host['noise']}, fault {host['fault']})")
    banner(model)
    non_default = {"model_tag": model, "model": model}
    for key in ("host", "port", "max_model_len", "served_model_name", "gpu_memory_utilization", "load_format",
                "seed", "max_num_seqs", "disable_log_stats", "enable_log_requests", "tensor_parallel_size"):
        val = getattr(args, key)
        if val not in (None, False) and not (key == "port" and val == 8000) and \
                not (key == "gpu_memory_utilization" and val == 0.9) and not (key == "load_format" and val == "auto") \
                and not (key == "max_num_seqs" and val == 256) and not (key == "seed" and val == 0) \
                and not (key == "tensor_parallel_size" and val == 1):
            non_default[key] = val
    try:
        spec = parse_speculative_config(args.speculative_config)
        if spec:
            non_default["speculative_config"] = spec
        if args.per_request_spec_decode_metrics != "none":
            non_default["per_request_spec_decode_metrics"] = args.per_request_spec_decode_metrics
            if not spec:  # VllmConfig.__post_init__ (config/vllm.py)
                raise ConfigError("ValueError", "--per-request-spec-decode-metrics requires speculative decoding "
                                  "to be enabled (via --speculative-config).")
        log("INFO", "api_utils.py:286", f"non-default args: {non_default}")
        if not simenv.nvidia_loaded():
            raise ConfigError("RuntimeError", "Failed to infer device type, please set the environment variable "
                              "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue.")
        mcfg = load_model_config(model)
        gpus = gpus_for(args.tensor_parallel_size)
    except ConfigError as e:
        return fail(e.kind, str(e))
    arch = (mcfg.get("architectures") or ["LlamaForCausalLM"])[0]
    log("INFO", "model.py:733", f"Resolved architecture: {arch}")
    max_len = args.max_model_len or int(mcfg.get("max_position_embeddings") or 40960)
    log("INFO", "model.py:2152", f"Using max model len {max_len}")
    if spec and spec["method"].startswith("ngram"):
        log("WARNING", "vllm.py:1605", "Async scheduling not supported with ngram-based speculative decoding "
                                       "and will be disabled.")
    bind_host = args.host or "0.0.0.0"
    try:
        srv = make_server(bind_host, args.port)
    except OSError as e:
        return fail("OSError", f"[Errno {e.errno}] {e.strerror}")
    wgib = weights_gib(model, mcfg)
    drafter = (spec or {}).get("model")
    dgib = weights_gib(drafter, load_model_config(drafter)) if drafter else None
    kind = calibration.engine_model(spec, weights_gib=wgib, kv_bytes_per_token=kv_bytes_per_token(mcfg),
                                    drafter_gib=dgib, gpu=gpus[0] if gpus else {}, tp=args.tensor_parallel_size)
    nfs = simenv.is_nfs_path(model)
    ec_cfg = {
        "model": model, "served_model_name": served, "max_model_len": max_len, "seed": args.seed,
        "gpu_memory_utilization": args.gpu_memory_utilization, "load_format": args.load_format,
        "spec_repr": spec_repr(spec), "spec_method": (spec or {}).get("method"),
        "draft_model": (spec or {}).get("model"), "weights_gib": wgib, "nfs": nfs,
        "kv_bytes_per_token": kv_bytes_per_token(mcfg),
        "gpus": [g["index"] for g in gpus], "tensor_parallel_size": args.tensor_parallel_size,
    }
    proc, ready_fd = start_enginecore(ec_cfg)
    state = {"stopping": False, "ready": False}
    stop = threading.Event()

    def on_signal(signum, frame):
        state["stopping"] = True
        stop.set()
        if not state["ready"]:
            shutdown(signum)

    def shutdown(signum):
        log("INFO", "launcher.py:254", "[shutdown] API server: shutdown triggered")
        if host["fault"] == "leave-enginecore":
            log("WARNING", "utils.py:347", "[shutdown] EngineCore did not acknowledge shutdown; exiting "
                "without it (SIMULATED fault leave-enginecore)")
        else:
            log("INFO", "launcher.py:270", "[shutdown] API server: stopping engine client mode=abort timeout=0s")
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            except OSError:
                pass
        os._exit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    info = wait_ready(proc, ready_fd)
    if info is None:
        code = proc.wait()
        log("ERROR", "core.py:1048", f"EngineCore failed to start (exit code {code}).")
        return fail("RuntimeError", "Engine core initialization failed. See root cause above. Failed core "
                    "proc(s): {'EngineCore': %d}" % code)
    if state["stopping"]:
        shutdown(signal.SIGTERM)

    metrics = Metrics(served, kind.k, spec_enabled=bool(spec) and not args.disable_log_stats)
    engine = Engine(kind, metrics, seed=args.seed, max_num_seqs=args.max_num_seqs, kv_tokens=info["kv_tokens"],
                    time_scale=simenv.time_scale(), host=host, log_stats=not args.disable_log_stats)
    if host["noise"] > 0:
        simenv.raw(f"SIMULATED noise: this server start's steps take x{engine.level:.4f} (relative sd "
                   f"{host['noise']:g}, seed {engine.noise_seed}: {engine.noise_how})")
    App.engine, App.metrics, App.served_name, App.model_path = engine, metrics, served, model
    App.max_model_len, App.log_requests = max_len, args.enable_log_requests
    App.spec_metrics, App.spec_k = args.per_request_spec_decode_metrics, kind.k
    if host["fault"] == "crash-mid-bench":
        crash_after = int(host.get("crash_after_requests") or 6)

        def on_admit(total):
            if total >= crash_after and proc.poll() is None:
                os.kill(proc.pid, signal.SIGUSR1)
        engine.on_admit = on_admit

    def watch_child():
        code = proc.wait()
        if not state["stopping"]:
            log("ERROR", "core_client.py:614", f"Engine core proc EngineCore died unexpectedly (exit code "
                f"{code}), shutting down client.")
            engine.kill("EngineCore encountered an issue. See stack trace (above) for the root cause.")
    threading.Thread(target=watch_child, name="EngineCoreMonitor", daemon=True).start()
    engine.start()
    log("INFO", "calibration.py:1", f"Simulated timing model: {kind.label} on GPU(s) "
        f"{','.join(str(g['index']) for g in gpus) or 'none'} (source: {calibration.SOURCE})")
    log("INFO", "entry.py:136", "Supported tasks: ['generate']")
    try:
        activate(srv)
    except OSError as e:
        log("ERROR", "launcher.py:93", f"listen() failed on {bind_host}:{args.port}: {e}")
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        return fail("OSError", f"[Errno {e.errno}] {e.strerror}")
    log("INFO", "entry.py:140", f"Starting vLLM server on http://{bind_host}:{args.port}")
    simenv.raw(f"INFO:     Started server process [{os.getpid()}]")
    simenv.raw("INFO:     Waiting for application startup.")
    simenv.raw("INFO:     Application startup complete.")
    state["ready"] = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    while not stop.wait(0.5):
        pass
    shutdown(signal.SIGTERM)
    return 0


