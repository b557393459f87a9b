"""Scheduler loop of the simulated engine (runs in the API server process, one thread).

Continuous batching: each engine step admits waiting requests (prefill), then every running
request gets 1 + accepted tokens. Before a step, each decoding request draws whether it drafts and
how many draft tokens are accepted (its own acceptance: method, Spec-Bench category, output
length, model.py); the step's duration follows from the batch (model.step_ms: sequences, verified
tokens, KV context) / speed_factor x level x (1 + jitter). `level` is drawn once per server start
(relative sd `noise`, simenv.start_noise_seed: independent from start to start, so repeats on their
own starts scatter like real runs and more of them narrow an interval); `jitter` per step (same sd,
averaged away over a run's steps). Tokens of one step go out as one SSE chunk.

Simulated clock: the engine keeps its own clock V (simulated seconds). A step advances V by its
duration; an idle engine's V follows the wall clock / time scale. Every chunk carries the V at
which its step ended and every stream the V at which its request arrived, so the simulated
client measures simulated GPU time exactly even when Python falls behind the wall-clock pacing
(high concurrency on a busy host). Steps are still paced against absolute wall deadlines
(V x scale), so wall time tracks simulated time whenever the host keeps up.
"""

from __future__ import annotations

import queue
import random
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from vllm import simenv
from vllm.calibration import EngineModel
from vllm.metrics import Metrics
from vllm.textsim import TextStream, planned_output_len, prompt_seed


BURST_QUIET_S = 0.003  # wall seconds without a new arrival that end a burst
AWAIT_CAP_S = 2.0      # wall seconds a step waits at most for a closed-loop client's next request


class EngineDeadError(RuntimeError):
    pass


@dataclass
class Request:
    request_id: str
    prompt: str
    prompt_tokens: int
    max_tokens: int
    greedy: bool
    out: "queue.Queue" = field(default_factory=queue.Queue)
    target_len: int = 0
    generated: int = 0
    text: TextStream | None = None
    aborted: bool = False
    arrival: float = 0.0  # time.monotonic() when the HTTP request reached the server
    category: str | None = None  # Spec-Bench category (x-simvllm-category), None: the report's mix
    arrival_v: float = 0.0  # simulated clock when the request reached the server
    acc: object = None  # model.Acceptance, set at admission
    burst: int = 0  # size of the client's first wave this request belongs to (x-simvllm-burst)
    pending: int | None = None  # closed-loop client: requests it sends after this one (x-simvllm-pending)
    # this request's own verify steps, in order: the draft tokens each accepted (vLLM's per-request
    # spec-decode stats, server.per_request_metrics); drafted = draft tokens proposed over those steps
    steps: list = field(default_factory=list)
    drafted: int = 0


class Engine:
    def __init__(self, model: EngineModel, metrics: Metrics, *, seed: int, max_num_seqs: int,
                 kv_tokens: int, time_scale: float, host: dict, log_stats: bool):
        self.model = model
        self.metrics = metrics
        self.max_num_seqs = max_num_seqs
        self.kv_tokens = max(1, kv_tokens)
        self.scale = time_scale
        self.speed = host["speed_factor"]
        self.noise = host["noise"]
        self.rng = random.Random(seed)
        self.noise_seed, self.noise_how = simenv.start_noise_seed(host) if self.noise > 0 else (0, "no noise")
        self.noise_rng = random.Random(self.noise_seed)
        # this start's speed level: run-to-run noise lives here (per-step jitter averages out)
        self.level = max(0.3, 1.0 + self.noise_rng.gauss(0.0, self.noise)) if self.noise > 0 else 1.0
        self.log_stats = log_stats
        self.cv = threading.Condition()
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.dead: str | None = None
        self.admitted_total = 0
        self.on_admit = None  # callback(n_admitted_total), used by the crash-mid-bench fault
        self._thread = threading.Thread(target=self._loop, name="EngineCoreClient", daemon=True)
        self._stats = threading.Thread(target=self._stats_loop, name="StatLogger", daemon=True)
        # simulated clock (see the module docstring)
        self.v = 0.0                      # V at the end of the last step (or when idle began)
        self.v_wall = time.monotonic()    # wall time at which V was self.v
        self.step_end_v: float | None = None  # V at which the step in flight ends (None: idle)
        self.burst_v: float | None = None     # V stamped on requests arriving at an idle engine
        self.anchor = (self.v_wall, self.v)   # (wall, V) pair the pacing deadlines count from
        self.last_arrival = 0.0               # wall time of the latest submit
        # closed-loop client (x-simvllm-pending): requests it has yet to send, replacements awaited
        self.min_pending = float("inf")
        self.awaiting = 0
        self._last = {"t": time.monotonic(), "prompt": 0, "gen": 0, "drafts": 0, "draft_tok": 0,
                      "acc": 0, "pos": [0] * len(metrics.accepted_per_pos)}

    def start(self) -> None:
        # steps are a few wall milliseconds: do not let handler threads hold the GIL for the
        # default 5 ms while the scheduler thread is due; not finer than 1 ms either: with hundreds of
        # streams, GIL hand-offs would eat the CPU (and the simulated clock keeps the numbers exact)
        sys.setswitchinterval(0.001)
        self._thread.start()
        if self.log_stats:
            self._stats.start()

    # ------------------------------------------------------------ API side
    def vnow(self) -> float:
        """V at which a request arriving now can join a step (call with self.cv held)."""
        if self.step_end_v is not None:
            return self.step_end_v  # busy: it joins the step after the one in flight
        if self.burst_v is None:  # idle: requests of one burst share the first one's arrival
            self.burst_v = self.v + max(0.0, time.monotonic() - self.v_wall) / self.scale
        return self.burst_v

    def submit(self, req: Request) -> None:
        with self.cv:
            if self.dead:
                raise EngineDeadError(self.dead)
            if req.burst and self.step_end_v is None:
                self.min_pending = float("inf")  # a new client run starts
            req.arrival_v = self.vnow()
            self.last_arrival = time.monotonic()
            if req.pending is not None:
                self.awaiting = max(0, self.awaiting - 1)
                self.min_pending = min(self.min_pending, req.pending)
            self.waiting.append(req)
            self.cv.notify()

    def abort(self, req: Request) -> None:
        req.aborted = True

    def kill(self, reason: str) -> None:
        """EngineCore died: fail everything in flight and everything after."""
        with self.cv:
            if self.dead:
                return
            self.dead = reason
            for req in list(self.running) + list(self.waiting):
                req.out.put(("error", reason))
            self.running.clear()
            self.waiting.clear()
            self.cv.notify_all()

    # ------------------------------------------------------------ loop
    def _step_duration(self, sim_ms: float) -> float:
        """Simulated seconds of a step of `sim_ms` model milliseconds on this host."""
        sim_ms *= self.level / self.speed
        if self.noise > 0:
            sim_ms *= max(0.3, 1.0 + self.noise_rng.gauss(0.0, self.noise))
        return sim_ms / 1000.0

    def _draw(self, req: Request) -> int:
        """Accepted draft tokens of one decode step of `req` (-1: no draft this step)."""
        acc = req.acc
        if not self.model.k or not acc.per_pos or self.rng.random() >= acc.draft_freq:
            return -1
        accepted = 0
        for p in acc.per_pos:  # per_pos[i] = P(accepted >= i+1): conditional chain
            prev = acc.per_pos[accepted - 1] if accepted else 1.0
            if self.rng.random() < (p / prev if prev > 0 else 0.0):
                accepted += 1
            else:
                break
        return max(0, min(accepted, req.target_len - req.generated - 1))

    def _loop(self) -> None:
        while True:
            with self.cv:
                self._await_replacements()
                was_idle = not self.running and self.step_end_v is None
                while not self.dead and not self.waiting and not self.running:
                    self.cv.wait()
                if self.dead:
                    return
                if was_idle:
                    # a burst (a concurrency-N client starting) reaches a GPU host within µs but this
                    # one over wall milliseconds: wait until arrivals pause (they all carry the burst's
                    # simulated arrival time, so the wait costs no simulated time) and batch them
                    # (the simulated client names its first wave's size: wait for all of it)
                    cap = time.monotonic() + 1.0
                    while not self.dead and len(self.waiting) < self.max_num_seqs:
                        want = max((r.burst for r in self.waiting), default=0)
                        if want and len(self.waiting) >= want:
                            break
                        left = (cap if want else min(self.last_arrival + BURST_QUIET_S, cap)) - time.monotonic()
                        if left <= 0:
                            break
                        self.cv.wait(left)
                admitted: list[Request] = []
                while self.waiting and len(self.running) + len(admitted) < self.max_num_seqs:
                    req = self.waiting.popleft()
                    if not req.aborted:
                        admitted.append(req)
                decoding = [r for r in self.running if not r.aborted]
                self.running = decoding + admitted
                with self.metrics.lock:
                    self.metrics.running = len(self.running)
                    self.metrics.waiting = len(self.waiting)
                batch = len(decoding) + len(admitted)
                if batch == 0:
                    self._go_idle()
                    continue
                start_v = self.v
                if was_idle or self.step_end_v is None:
                    start_v = max(self.v, min(r.arrival_v for r in admitted) if admitted else self.v)
                    # the wall clock that V = start_v stands for: pacing counts from there
                    self.anchor = (self.v_wall + (start_v - self.v) * self.scale, start_v)
                    self.burst_v = None
                drafts = [self._draw(r) for r in decoding]
                tokens = batch + self.model.k * sum(1 for d in drafts if d >= 0)
                context = sum(r.prompt_tokens + r.generated for r in decoding) + \
                    sum(r.prompt_tokens for r in admitted)
                sim_ms = self.model.step_ms(batch, tokens, context)
                sim_ms += self.model.prefill_ms(sum(r.prompt_tokens for r in admitted))
                end_v = start_v + self._step_duration(sim_ms)
                self.step_end_v = end_v
            wall_anchor, v_anchor = self.anchor
            deadline = wall_anchor + (end_v - v_anchor) * self.scale
            now = time.monotonic()
            if deadline < now - 0.25:  # far behind (a busy host): pace from here on, V stays exact
                self.anchor = (now, end_v)
            if deadline > now:
                time.sleep(deadline - now)
            if self.dead:
                return
            t_end = time.monotonic()  # the wall time that stands for V = end_v
            self._emit(decoding, admitted, drafts, end_v)
            with self.cv:
                self.v, self.v_wall = end_v, t_end
                if not self.running and not self.waiting and not self.awaiting:
                    self._go_idle()

    def _go_idle(self) -> None:
        self.step_end_v = None

    def _await_replacements(self) -> None:
        """Closed loop (call with self.cv held): before the next step, wait (wall time only, V
        stands still) for the requests a concurrency-N client sends as soon as one finishes; on a
        GPU host they arrive within µs and join the very next step. A client silent for
        AWAIT_CAP_S is given up on."""
        cap = time.monotonic() + AWAIT_CAP_S
        while self.awaiting > 0 and not self.dead:
            left = cap - time.monotonic()
            if left <= 0:
                self.awaiting = 0
                break
            self.cv.wait(left)
        if not self.running and not self.waiting:
            self._go_idle()

    def _emit(self, decoding: list[Request], admitted: list[Request], drafts: list[int], v: float) -> None:
        k = self.model.k
        finished: list[Request] = []
        outbox: list[tuple] = []
        with self.metrics.lock:
            for req in admitted:  # prefill step: first token
                self.admitted_total += 1
                req.text = TextStream(req.prompt, prompt_seed(req.prompt) ^ self.rng.getrandbits(16)
                                      if not req.greedy else prompt_seed(req.prompt))
                req.target_len = planned_output_len(req.prompt, req.max_tokens, req.greedy, self.rng)
                req.acc = self.model.acceptance(req.category, req.max_tokens)
                self.metrics.prompt_tokens += req.prompt_tokens
                self._give(req, 1, finished, outbox, v)
            for req, accepted in zip(decoding, drafts):
                n = 1
                if accepted >= 0:
                    accepted = max(0, min(accepted, req.target_len - req.generated - 1))
                    self.metrics.record_draft(k, accepted)
                    req.steps.append(accepted)
                    req.drafted += k
                    n += accepted
                self._give(req, n, finished, outbox, v)
            used = sum(r.prompt_tokens + r.generated for r in self.running)
            self.metrics.kv_usage = min(1.0, used / self.kv_tokens)
            self.metrics.iterations += 1
        if self.on_admit and admitted:
            self.on_admit(self.admitted_total)
        if finished:
            with self.cv:
                self.running = [r for r in self.running if r not in finished]
                for req in finished:  # a closed-loop client sends the next request at once
                    if req.pending is not None and self.min_pending - self.awaiting > 0:
                        self.awaiting += 1
        # only now the chunks go out: a replacement may arrive at once and must find itself awaited
        for req, item in outbox:
            req.out.put(item)

    def _give(self, req: Request, n: int, finished: list, outbox: list, v: float) -> None:
        n = min(n, req.target_len - req.generated)
        req.generated += n
        self.metrics.generation_tokens += n
        done = req.generated >= req.target_len
        reason = None
        if done:
            reason = "length" if req.generated >= req.max_tokens else "stop"
            self.metrics.success[reason] += 1
            finished.append(req)
        outbox.append((req, ("tokens", req.text.tokens(n), n, reason, v)))

    # ------------------------------------------------------------ periodic log (loggers.py)
    def _stats_loop(self) -> None:
        while not self.dead:
            time.sleep(10.0)
            m, last = self.metrics, self._last
            with m.lock:
                now = time.monotonic()
                dt = max(1e-6, now - last["t"])
                p_tput = (m.prompt_tokens - last["prompt"]) / dt
                g_tput = (m.generation_tokens - last["gen"]) / dt
                drafts, dtok, acc = (m.num_drafts - last["drafts"], m.num_draft_tokens - last["draft_tok"],
                                     m.num_accepted - last["acc"])
                pos = [a - b for a, b in zip(m.accepted_per_pos, last["pos"])]
                running, waiting, kv = m.running, m.waiting, m.kv_usage
                self._last = {"t": now, "prompt": m.prompt_tokens, "gen": m.generation_tokens,
                              "drafts": m.num_drafts, "draft_tok": m.num_draft_tokens,
                              "acc": m.num_accepted, "pos": list(m.accepted_per_pos)}
            if p_tput == 0 and g_tput == 0:
                continue
            simenv.log("APIServer", "INFO", "loggers.py:259",
                       f"Engine 000: Avg prompt throughput: {p_tput:.1f} tokens/s, Avg generation "
                       f"throughput: {g_tput:.1f} tokens/s (wall clock of the SIMULATED engine), "
                       f"Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: "
                       f"{kv * 100:.1f}%, Prefix cache hit rate: 0.0%")
            if m.spec_enabled and drafts > 0:
                rates = ", ".join(f"{p / drafts:.3f}" for p in pos)
                simenv.log("APIServer", "INFO", "metrics.py:100",
                           f"SpecDecoding metrics: Mean acceptance length: {1 + acc / drafts:.2f}, "
                           f"Accepted throughput: {acc / dt:.2f} tokens/s, Drafted throughput: "
                           f"{dtok / dt:.2f} tokens/s, Accepted: {acc} tokens, Drafted: {dtok} tokens, "
                           f"Per-position acceptance rate: {rates}, Avg Draft acceptance rate: "
                           f"{100 * acc / max(1, dtok):.1f}%")
