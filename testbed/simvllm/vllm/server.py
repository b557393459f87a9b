"""HTTP front-end of the simulated `vllm serve` (OpenAI-compatible subset, /health, /metrics)."""

from __future__ import annotations

import json
import os
import socketserver
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from vllm import __version__, simenv
from vllm.engine import EngineDeadError, Request
from vllm.model import CATEGORIES
from vllm.textsim import chat_template, count_tokens


class App:
    """Everything a request handler needs (set by serve.py)."""

    engine = None
    metrics = None
    served_name = "model"
    model_path = ""
    max_model_len = 2048
    log_requests = False
    access_log = True
    spec_metrics = "none"  # --per-request-spec-decode-metrics: none | summary | detailed
    spec_k = 0             # the server's num_speculative_tokens


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # SSE chunks are small writes: no Nagle / delayed-ACK stalls
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format, *args):  # uvicorn-style access log
        pass

    def _access(self, code: int) -> None:
        if App.access_log:
            phrase = self.responses.get(code, ("",))[0]
            simenv.raw(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - '
                       f'"{self.command} {self.path} HTTP/1.1" {code} {phrase}')

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.send_header("x-simulated-engine", "specfleet-simvllm")
        self.end_headers()
        self.wfile.write(body)
        self._access(code)

    def _json(self, code: int, obj) -> None:
        self._send(code, json.dumps(obj).encode())

    def _error(self, code: int, msg: str, etype: str = "BadRequestError") -> None:
        self._json(code, {"error": {"message": msg, "type": etype, "param": None, "code": code}})

    # ---------------------------------------------------------------- GET
    def do_GET(self):
        path = self.path.split("?", 1)[0]
        eng = App.engine
        if path == "/health":
            self._send(503 if eng is None or eng.dead else 200, b"")
        elif path == "/ping":
            self._send(503 if eng is None or eng.dead else 200, b"")
        elif path == "/version":
            self._json(200, {"version": __version__, "simulated": True, "engine": "specfleet-simvllm"})
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{
                "id": App.served_name, "object": "model", "created": int(time.time()),
                "owned_by": "vllm", "root": App.model_path, "parent": None,
                "max_model_len": App.max_model_len, "permission": []}]})
        elif path == "/metrics":
            self._send(200, App.metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._json(404, {"detail": "Not Found"})

    # ---------------------------------------------------------------- POST
    def do_POST(self):
        self.t_arrival = time.monotonic()
        path = self.path.split("?", 1)[0]
        try:
            n = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            return self._error(400, "Invalid JSON body")
        if path == "/v1/chat/completions":
            msgs = body.get("messages") or []
            if not isinstance(msgs, list) or not msgs:
                return self._error(400, "messages must be a non-empty list")
            content = "".join(self._content(m) for m in msgs if isinstance(m, dict))
            prompt = chat_template(content)
            max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
            return self._generate(body, prompt, max_tokens, chat=True)
        if path == "/v1/completions":
            prompt = body.get("prompt")
            if isinstance(prompt, list):
                prompt = prompt[0] if prompt else ""
            if not isinstance(prompt, str):
                return self._error(400, "prompt must be a string")
            return self._generate(body, prompt, body.get("max_tokens", 16), chat=False)
        if path == "/reset_prefix_cache" and os.environ.get("VLLM_SERVER_DEV_MODE") == "1":
            # as in vLLM: a dev-mode route only; the simulation has no prefix cache to drop
            return self._send(200, b"")
        self._json(404, {"detail": "Not Found"})

    @staticmethod
    def _content(msg: dict) -> str:
        c = msg.get("content")
        if isinstance(c, list):
            return "".join(p.get("text", "") for p in c if isinstance(p, dict))
        return str(c or "")

    def _generate(self, body: dict, prompt: str, max_tokens, chat: bool):
        eng = App.engine
        model = body.get("model")
        if model not in (None, App.served_name):
            return self._error(404, f"The model `{model}` does not exist.", "NotFoundError")
        if eng is None or eng.dead:
            return self._error(500, "EngineCore encountered an issue. See stack trace (above) for the root "
                                    "cause.", "EngineDeadError")
        ptoks = count_tokens(prompt)
        if max_tokens is None:
            max_tokens = App.max_model_len - ptoks
        try:
            max_tokens = int(max_tokens)
        except (TypeError, ValueError):
            return self._error(400, "max_tokens must be an integer")
        if ptoks + max_tokens > App.max_model_len or max_tokens < 1:
            return self._error(400, (
                f"This model's maximum context length is {App.max_model_len} tokens. However, you "
                f"requested {ptoks + max_tokens} tokens ({ptoks} in the messages, {max_tokens} in the "
                "completion). Please reduce the length of the messages or completion."))
        temp = body.get("temperature")
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        # the simulated client names the Spec-Bench category of each request (a real client does not:
        # a real engine's acceptance follows from the text itself); unknown or absent: the report's mix
        category = self.headers.get("x-simvllm-category")
        req = Request(rid, prompt, ptoks, max_tokens, greedy=(temp is not None and float(temp) == 0.0),
                      arrival=self.t_arrival, category=category if category in CATEGORIES else None,
                      burst=_int(self.headers.get("x-simvllm-burst")),
                      pending=_int(self.headers["x-simvllm-pending"]) if "x-simvllm-pending" in self.headers else None)
        if App.log_requests:
            simenv.log("APIServer", "INFO", "logger.py:43",
                       f"Received request {rid}: params: max_tokens={max_tokens}, temperature={temp}")
        try:
            eng.submit(req)
        except EngineDeadError as e:
            return self._error(500, str(e), "EngineDeadError")
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return self._stream(req, chat, usage)
        return self._complete(req, chat)

    def _chunk(self, data: str) -> None:
        raw = data.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
        self.wfile.flush()

    def _stream(self, req: Request, chat: bool, include_usage: bool) -> None:
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-simulated-engine", "specfleet-simvllm")
        # the engine's simulated clock (engine.py): when the request arrived; chunks carry theirs
        self.send_header("x-simvllm-arrival-s", f"{req.arrival_v:.6f}")
        self.end_headers()
        self._access(200)

        def event(choices, usage=None, v=None, metrics=None):
            d = {"id": req.request_id, "object": obj, "created": created, "model": App.served_name,
                 "choices": choices}
            if usage is not None:
                d["usage"] = usage
            if metrics is not None:
                d["metrics"] = metrics
            if v is not None:
                d["simulated_time_s"] = round(v, 6)
            self._chunk("data: " + json.dumps(d) + "\n\n")

        try:
            first = True
            while True:
                item = req.out.get()
                if first and chat and item[0] == "tokens":  # vLLM sends the role with the first output
                    first = False
                    event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                            "finish_reason": None}], v=item[4])
                if item[0] == "error":
                    simenv.log("APIServer", "ERROR", "async_llm.py:525", f"AsyncLLM output_handler failed: {item[1]}")
                    # abort the HTTP stream without the terminating chunk: the client sees a cut payload
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                _, text, n, reason, v = item
                # as vLLM: the per-request metrics ride on the stream's final chunk only
                last = per_request_metrics(req) if reason is not None and not include_usage else None
                if chat:
                    event([{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": reason}],
                          v=v, metrics=last)
                else:
                    event([{"index": 0, "text": text, "logprobs": None, "finish_reason": reason,
                            "stop_reason": None}], v=v, metrics=last)
                if reason is not None:
                    break
            if include_usage:
                event([], {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + req.generated,
                           "completion_tokens": req.generated}, metrics=per_request_metrics(req))
            self._chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
            App.engine.abort(req)

    def _complete(self, req: Request, chat: bool) -> None:
        text = []
        reason = None
        while True:
            item = req.out.get()
            if item[0] == "error":
                return self._error(500, item[1], "EngineDeadError")
            text.append(item[1])
            reason = item[3]
            if reason is not None:
                break
        usage = {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + req.generated,
                 "completion_tokens": req.generated}
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": "".join(text)},
                      "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": "".join(text), "logprobs": None, "finish_reason": reason}
        body = {"id": req.request_id, "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()), "model": App.served_name, "choices": [choice], "usage": usage}
        metrics = per_request_metrics(req)
        if metrics is not None:
            body["metrics"] = metrics
        self._json(200, body)


def per_request_metrics(req: Request) -> dict | None:
    """The response's `metrics` object under --per-request-spec-decode-metrics summary|detailed (vLLM's
    PerRequestMetrics.speculative_decoding, entrypoints/generate/base/protocol.py): the request's own verify
    steps as the engine drew them from its acceptance model (engine.py), None when the flag is `none`.
    A request that never drafted (an n-gram prompt without a match) has 0 steps: length 1.0, rate 0.0, as
    vLLM 0.32.0's RequestSpecDecodeMetrics.to_dict (v1/metrics/stats.py, read from its wheel)."""
    if App.spec_metrics == "none":
        return None
    hist = [0] * (App.spec_k + 1)
    for a in req.steps:
        hist[a] += 1
    steps, accepted = len(req.steps), sum(req.steps)
    spec = {"mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / req.drafted if req.drafted else 0.0,
            "acceptance_histogram": list(hist), "num_spec_steps": steps, "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": req.drafted, "num_spec_tokens": App.spec_k}
    if App.spec_metrics == "detailed":  # the per-step arrays, in step order
        spec.update(per_step_accepted=list(req.steps), per_step_drafted=[App.spec_k] * steps)
    return {"speculative_decoding": spec}


def _int(value) -> int:
    try:
        return max(0, min(int(value), 100000))
    except (TypeError, ValueError):
        return 0


def make_server(host: str, port: int) -> SimHTTPServer:
    """Bind (but do not listen) like vLLM: the port is taken, connections are refused."""
    srv = SimHTTPServer((host, port), Handler, bind_and_activate=False)
    srv.server_bind()
    return srv


def activate(srv: SimHTTPServer) -> None:
    socketserver.TCPServer.server_activate(srv)

