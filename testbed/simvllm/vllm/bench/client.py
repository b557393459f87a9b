"""Streaming HTTP request functions (stdlib http.client), as vLLM's endpoint_request_func.py.

Times: against the simulated server, the engine's simulated clock (the stream's
`x-simvllm-arrival-s` header, each chunk's `simulated_time_s`), in simulated seconds
(`RequestOutput.simulated_clock`); against any other server, wall-clock perf_counter seconds,
which serve.py divides by the time scale.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field


@dataclass
class RequestInput:
    prompt: str
    api_url: str
    prompt_len: int
    output_len: int
    model: str
    extra_body: dict = field(default_factory=dict)
    ignore_eos: bool = False
    logprobs: int | None = None
    timeout: float = 3600.0
    category: str | None = None  # Spec-Bench category, sent as x-simvllm-category (simulated engine)
    burst: int = 0  # > 0: one of the first wave of this many requests (x-simvllm-burst)
    pending: int | None = None  # closed loop: requests sent after this one (x-simvllm-pending)


@dataclass
class RequestOutput:
    generated_text: str = ""
    success: bool = False
    latency: float = 0.0
    output_tokens: int = 0
    ttft: float = 0.0
    itl: list = field(default_factory=list)
    prompt_len: int = 0
    error: str = ""
    start_time: float = 0.0
    client_queue_time: float = 0.0
    simulated_clock: bool = False  # ttft, itl, latency are the engine's simulated seconds already
    sim_start: float = 0.0  # simulated-clock arrival (start_time stays wall-clock for the queue time)


def _connect(url: str, timeout: float):
    u = urllib.parse.urlsplit(url)
    if u.scheme == "https":
        conn = http.client.HTTPSConnection(u.hostname, u.port or 443, timeout=timeout)
    else:
        conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    path = u.path + ("?" + u.query if u.query else "")
    return conn, path


_local = threading.local()


def _pooled(url: str, timeout: float):
    """One keep-alive connection per thread and server, like aiohttp's connector."""
    u = urllib.parse.urlsplit(url)
    key = (u.scheme, u.hostname, u.port)
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = {}
    conn = pool.get(key)
    if conn is None:
        conn, _ = _connect(url, timeout)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pool[key] = conn
    conn.timeout = timeout
    return conn, key


def prepare(url: str, timeout: float) -> None:
    """Open this thread's keep-alive connection ahead of time (errors surface at request time)."""
    try:
        _pooled(url, timeout)
    except OSError:
        pass


def _drop(key) -> None:
    conn = getattr(_local, "pool", {}).pop(key, None)
    if conn is not None:
        conn.close()


def http_get(url: str, timeout: float = 30.0) -> tuple[int, bytes]:
    conn, path = _connect(url, timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def request(inp: RequestInput, chat: bool) -> RequestOutput:
    out = RequestOutput(prompt_len=inp.prompt_len)
    if chat:
        payload = {"model": inp.model, "messages": [{"role": "user", "content": inp.prompt}],
                   "max_completion_tokens": inp.output_len, "stream": True,
                   "stream_options": {"include_usage": True}}
    else:
        payload = {"model": inp.model, "prompt": inp.prompt, "repetition_penalty": 1.0,
                   "max_tokens": inp.output_len, "logprobs": inp.logprobs, "stream": True,
                   "stream_options": {"include_usage": True}}
    if inp.ignore_eos:
        payload["ignore_eos"] = True
    payload.update(inp.extra_body)
    body = json.dumps(payload).encode()
    generated = []
    ttft = 0.0
    st = time.perf_counter()
    out.start_time = st
    most_recent = st
    key = None
    path = urllib.parse.urlsplit(inp.api_url).path
    headers = {"Content-Type": "application/json", "Authorization": "Bearer EMPTY"}
    if inp.category:
        headers["x-simvllm-category"] = inp.category
    if inp.burst:
        headers["x-simvllm-burst"] = str(inp.burst)
    if inp.pending is not None:
        headers["x-simvllm-pending"] = str(inp.pending)
    try:
        for attempt in (0, 1):  # a kept-alive connection may have been closed by the server
            conn, key = _pooled(inp.api_url, inp.timeout)
            try:
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                _drop(key)
                if attempt:
                    raise
                st = time.perf_counter()
                out.start_time = most_recent = st
        if resp.status != 200:
            out.error = f"{resp.status} {resp.reason}: {resp.read()[:500].decode('utf-8', 'replace')}"
            if resp.will_close:
                _drop(key)
            return out
        sim_arrival = resp.getheader("x-simvllm-arrival-s")
        if sim_arrival is not None:  # the simulated engine's clock replaces the wall clock
            try:
                st = most_recent = float(sim_arrival)
                out.simulated_clock = True
            except ValueError:
                pass
        got_done = False
        while True:
            line = resp.readline()
            if not line:
                break
            chunk = line.strip()
            if not chunk:
                continue
            text = chunk.decode("utf-8")
            if text.startswith(":"):
                continue
            text = text.removeprefix("data: ")
            if text == "[DONE]":
                got_done = True
                continue
            timestamp = time.perf_counter()
            data = json.loads(text)
            if out.simulated_clock:
                timestamp = data.get("simulated_time_s", most_recent)
            if choices := data.get("choices"):
                content = choices[0]["delta"].get("content") if chat else choices[0].get("text")
                if ttft == 0.0:
                    ttft = timestamp - st
                    out.ttft = ttft
                else:
                    out.itl.append(timestamp - most_recent)
                generated.append(content or "")
            elif usage := data.get("usage"):
                out.output_tokens = usage.get("completion_tokens") or 0
                if usage.get("prompt_tokens"):
                    out.prompt_len = usage["prompt_tokens"]
            elif "error" in data:
                out.error = json.dumps(data["error"])
                return out
            most_recent = timestamp
        out.generated_text = "".join(generated)
        if resp.will_close:
            _drop(key)
        if not got_done:
            out.error = "ClientPayloadError: Response payload is not completed (stream ended without [DONE])"
            return out
        out.success = True
        out.latency = most_recent - st
        if out.simulated_clock:
            out.sim_start = st
    except http.client.IncompleteRead as e:
        out.error = f"ClientPayloadError: Response payload is not completed: {e!r}"
        _drop(key)
    except (OSError, http.client.HTTPException, ValueError) as e:
        out.error = f"{type(e).__name__}: {e}"
        _drop(key)
    return out
