"""One server's lifecycle on the worker, a lane of the runner's pool (runner.py). Stdlib only.

preflight -> `vllm serve` in its own session -> /health -> `vllm bench serve` per bench run -> stop.
A Lane records through its owner (`owner.set`) and raises ItemFailed / Fatal / Stopped; the runner
alone decides what each means for the queue (runner.Runner.ended; docs/dev/worker.md).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import replace

from . import acceptance, drafter, layout
from .host import (Fatal, ItemFailed, Stopped, atomic_write, end_pids, engine_identity, env_without_devices, gpu_table,
                   kill, live_pids, log, now, sourced_env, proc_argv0, proc_has_token)
from .fitcheck import CHAT_BACKEND, applied_template
from .record import RunCell, RunRecord
from .runspec import CUSTOM, BenchRun, Client, Dropped, Fit, Gpu, Item, ItemState
from .telemetry import sampler_for

# vLLM's sampling parameters that generation_config.json can set (get_diff_sampling_param)
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def fitcheck_command(python: str, tool: str = "fitcheck") -> list[str]:
    """The prompt-fit check (or the acceptance pass, `tool`), run with the venv's python (the model's
    tokenizer): from the worker's artefact (`runner.pyz fitcheck`), or, run from a checkout, fitcheck.py
    beside this file."""
    here = os.path.dirname(os.path.abspath(__file__))
    artefact = os.path.dirname(here)  # <home>/runner.pyz/specfleet_worker/runner.py
    return [python, artefact, tool] if os.path.isfile(artefact) else [python, os.path.join(here, f"{tool}.py")]


def failed_requests(result: dict, expected: int, tolerance: int) -> str | None:
    """Why a run does not count (fewer than `expected - tolerance` requests completed), or None.

    The cause is what vLLM answered (the result's per-request `errors`), most frequent first.
    """
    completed = result.get("completed")
    if isinstance(completed, bool) or not isinstance(completed, int):
        return "the result has no `completed` count"
    failed = result.get("failed")
    if isinstance(failed, bool) or not isinstance(failed, int):
        failed = max(0, expected - completed)
    if expected - completed <= tolerance and failed <= tolerance:
        return None
    causes = Counter(request_error(e) for e in result.get("errors") or [] if isinstance(e, str) and e.strip())
    said = "; ".join(f"{n} x {c}" for c, n in causes.most_common(3)) or \
        "no per-request errors recorded (--save-detailed off?); see the bench log"
    return (f"{expected - completed} of {expected} requests did not complete ({failed} failed, tolerance "
            f"{tolerance}); vLLM said: {said}")


def request_error(text: str) -> str:
    """The message inside an error such as '400 Bad Request: {"error": {"message": ...}}'."""
    text = text.strip()
    i = text.find("{")
    if i >= 0:
        try:
            body = json.loads(text[i:])
            inner = body.get("error", body) if isinstance(body, dict) else body
            msg = inner.get("message") if isinstance(inner, dict) else inner
            if isinstance(msg, str) and msg.strip():
                return msg.strip()[:300]
        except ValueError:
            pass
    return text[:300]


def tail(path: str, n: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 65536))
            return "\n".join(f.read().decode(errors="replace").splitlines()[-n:])
    except OSError as e:
        return f"(no log: {e})"


def server_tag(run_dir: str, name: str) -> str:
    """The SPECFLEET_SERVER value of one server: its run dir and item name. The name alone is not
    enough: another runner that can see this node's processes (the testbed's workers share one PID
    namespace; another campaign on the node) runs a `vanilla` too, and a leftover search by the bare
    name ended the neighbour's EngineCore (its streams ended without [DONE])."""
    return f"{run_dir}/{name}"


class Lane:
    """One running server of the runner's pool: the item's lifecycle on `gpus` (None: the node's
    GPUs as the one-GPU runner sees them, no CUDA_VISIBLE_DEVICES) at `port`. What every lane shares
    (spec, state, the engine identity, the fit checks, stopping) is the owner's."""

    def __init__(self, owner, gpus: list[Gpu] | None, port: int):
        self.owner, self.spec, self.run_dir = owner, owner.spec, owner.run_dir
        self.gpus, self.port = gpus, port
        self.server: subprocess.Popen | None = None
        self.bench: subprocess.Popen | None = None
        self.env: dict | None = None
        self.model: str | None = None
        self.sampling: dict | None = None     # the server's generation defaults, read in preflight
        self.drafter: dict | None = None      # the drafter check's warnings and notes, read in preflight
        self.token = b""                      # SPECFLEET_SERVER=<tag>: what stop_server ends as this server's
        self.held_why: str | None = None      # set when these GPUs are held by a foreign process before start
        self.serve_argv: list[str] | None = None  # the running server's argv and start id (its run records)
        self.server_start: str | None = None
        self.starts = 0

    def run_item(self, item: Item, rec: ItemState) -> None:
        # stop_server ends leftover VLLM:: processes carrying this token: this server's, not a neighbour's
        self.token = f"SPECFLEET_SERVER={server_tag(self.run_dir, item.name)}".encode()
        self.owner.set(rec, "preflight", "checking GPU, port, model, venv, env file, prompt lengths")
        self.preflight(item)
        self.owner.set(rec, model_path=self.model)
        runs = self.fit_prompts(item, rec)
        try:
            self.start_and_wait(item, rec)
            self.owner.set(rec, "benchmarking", "")
            for i, b in enumerate(runs):
                if i > 0:
                    self.between_runs(item, rec)
                reps, k = item.client.repeats, b.rep  # "run 1/2" read as a repeat
                rep = f", gate run {k}" if k > reps else f", repeat {k} of {reps}" if reps > 1 else ""
                self.owner.set(rec, phase=f"bench {b.cell or 'concurrency ' + str(b.concurrency)}{rep} "
                                    f"(bench run {i + 1} of {len(runs)} on this server)", requests=None)
                rec.results.append(self.run_bench(item, b, rec))
                self.owner.save()
            self.acceptance_pass(item, runs, rec)
        finally:
            if self.server is not None:
                try:
                    self.owner.set(rec, "stopping", "stopping server, waiting for GPU memory")
                finally:  # even when the state cannot be written (full disk): the server ends
                    self.stop_server()
        marker = {"item_hash": item.item_hash, "run_id": self.spec.run_id,
                  "plan_hash": self.spec.plan_hash, "finished_at": now(), "results": rec.results}
        self.owner.write_marker(item, marker)
        self.owner.set(rec, "done", "done", finished_at=now())

    # ---------------------------------------------------------------- preflight
    def gpu_used_mib(self) -> int:
        """Max memory used over its GPUs (None: the spec's gpu_index, else every GPU), in MiB."""
        table = gpu_table(env_without_devices(self.env))
        if self.gpus is None:
            rows = [t["used"] for t in table if self.spec.gpu_index in (None, t["index"])]
            missing = [] if rows else [str(self.spec.gpu_index)]
        else:
            rows = [t["used"] for t in table if t["uuid"] in {g.uuid for g in self.gpus}]
            missing = sorted({g.uuid for g in self.gpus} - {t["uuid"] for t in table})
        if missing:
            raise ItemFailed(f"GPU(s) {', '.join(missing)} not listed by nvidia-smi")
        return max(rows)

    def end(self) -> None:
        """Ends its bench client and server at once (the runner is aborting), then stops as ever."""
        for p in (self.bench, self.server):
            if p is not None and p.poll() is None:
                kill(p.pid, signal.SIGTERM, group=True)
        self.stop_server()

    def wait_gpu_free(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while True:
            used = self.gpu_used_mib()
            if used < self.spec.gpu_memory_free_mib or time.monotonic() >= deadline:
                return used
            time.sleep(1.0)

    def preflight(self, item: Item) -> None:
        s = self.spec
        env = dict(os.environ)
        if s.env_file:
            if not os.path.isfile(s.env_file):
                raise ItemFailed(f"env file {s.env_file} is missing")
            env = sourced_env(s.env_file, env)
        venv_bin = os.path.join(s.venv, "bin")
        env.update(VIRTUAL_ENV=s.venv, PATH=f"{venv_bin}:{env.get('PATH', '/usr/bin:/bin')}",
                   SPECFLEET_RUN_ID=s.run_id, SPECFLEET_RUN_DIR=self.run_dir)
        if s.prefix_cache == "reset":
            env["VLLM_SERVER_DEV_MODE"] = "1"  # exposes POST /reset_prefix_cache
        if self.gpus:  # the server sees its own GPUs, by UUID
            env["CUDA_VISIBLE_DEVICES"] = ",".join(g.uuid for g in self.gpus)
        env["SPECFLEET_SERVER"] = server_tag(self.run_dir, item.name)
        self.env = env
        used = self.wait_gpu_free(min(30.0, s.stop_timeout_s))
        if used >= s.gpu_memory_free_mib and self.gpus:  # a foreign holder: the set is kept out, not item by item
            self.held_why = (f"memory used {used} MiB >= {s.gpu_memory_free_mib} MiB before start "
                             "(another process holds it)")
            where = ",".join(f"{g.index} ({g.uuid})" for g in self.gpus)
            raise ItemFailed(f"GPU memory used {used} MiB on GPU {where} before start: "
                             "another process holds it; these GPUs are kept out of this run")
        if used >= s.gpu_memory_free_mib:
            raise ItemFailed(f"GPU memory used {used} MiB >= {s.gpu_memory_free_mib} MiB before start: "
                             "another process holds the GPU")
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((s.server_host, self.port))
            except OSError as e:
                raise ItemFailed(f"port {self.port} on {s.server_host} is in use ({e.strerror}): "
                                 "a leftover server?") from None
        self.model = next((d for d in s.model_candidates
                           if os.access(os.path.join(d, "config.json"), os.R_OK)), None)
        if not self.model:
            raise ItemFailed("no readable model directory (with config.json) among: "
                             + ", ".join(s.model_candidates))
        self.owner.state.model_path = self.model
        for path in item.required_paths:
            if not os.access(path, os.R_OK):
                raise ItemFailed(f"required file {path} is not readable")
        vllm = os.path.join(venv_bin, "vllm")
        if not os.access(vllm, os.X_OK):
            raise ItemFailed(f"{vllm} is missing or not executable: is {s.venv} a vLLM venv?")
        if self.owner.state.engine is None:  # from the package metadata: importing vLLM would take ~20 s
            ident = engine_identity(os.path.join(venv_bin, "python"), env)
            want = s.expected_vllm_version
            if want and ident["version"] != want:
                raise ItemFailed(f"the venv has vLLM {ident['version']}, the plan pins {want}")
            with self.owner.lock:  # every result carries it
                self.owner.state.vllm_version, self.owner.state.engine = ident["version"], ident
        self.check_release(item)
        self.check_template(item)
        self.drafter = self.check_drafter(item)
        self.sampling = self.server_sampling(item)

    def template_on(self, backend: str) -> str:
        """Where this venv's bench chat-templates the prompts (fitcheck.applied_template's words): its
        client templates unless the release skips it for the backend (acceptance.client_templates)."""
        client = acceptance.client_templates(self.owner.state.vllm_version, backend)
        return applied_template("double" if client and backend == CHAT_BACKEND else "single", backend)

    def check_template(self, item: Item) -> None:
        """The plan's benchmark.chat_template against the release the venv reports (the matrix's releases
        were refused by check_release already; a newer one is refused here), before the server starts."""
        said, backend = item.fit and item.fit.chat_template, item.client.backend
        on = self.template_on(backend)
        want = "double" if on == "client+server" else "single"
        if said not in (None, want):
            raise ItemFailed(f"benchmark.chat_template: {said}: the venv's vLLM "
                             f"{self.owner.state.vllm_version} chat-templates the prompts of backend {backend} "
                             f"on the {on.replace('+', ' and the ')} ({want}); nothing was started")

    def check_release(self, item: Item) -> None:
        """The bastion checked the item against every vLLM release of its matrix (release_refusals: the
        one line each refusing release gives); refused here under the release the venv reports."""
        version = str(self.owner.state.vllm_version or "")
        m = re.match(r"\d+\.\d+\.\d+", version)
        line = (item.release_refusals or {}).get(m.group(0) if m else "")
        if line:
            raise ItemFailed(f"{line} (the venv reports vLLM {version}; nothing was started)")

    def check_drafter(self, item: Item) -> dict | None:
        """A trained drafter against the model, from their config.json (drafter.py): a mismatch fails the
        item before its server starts; warnings and notes go into every result (drafter_check)."""
        sc = item.serve.speculative_config or {}
        draft = sc.get("model")
        if not isinstance(draft, str) or not draft.startswith("/"):
            return None
        try:
            with open(os.path.join(draft, "config.json")) as f, open(os.path.join(self.model, "config.json")) as g:
                d, m = json.load(f), json.load(g)
            refusal, warnings, notes = drafter.check(d, m, method=str(sc.get("method")),
                                                     k=sc.get("num_speculative_tokens"), model_dir=self.model,
                                                     draft_dir=draft)
        except (OSError, ValueError, TypeError, AttributeError, KeyError, IndexError) as e:
            return {"warnings": [], "notes": [f"the drafter {draft} was not checked against the model: {e}"]}
        if refusal:
            raise ItemFailed(f"{refusal}; nothing was started")
        return {"warnings": warnings, "notes": notes}

    def server_sampling(self, item: Item) -> dict:
        """The sampling defaults the server applies to what the client does not send.

        vLLM's --generation-config: `auto` (default) = the model's generation_config.json, `vllm` =
        none (vLLM's own defaults: temperature 1.0), a folder = that folder's file.
        """
        src = item.serve.sampling_source()
        if src == "vllm":
            return {"source": "vllm defaults", "params": {}}
        folder = self.model if src == "auto" else src
        path = os.path.join(folder or "", "generation_config.json")
        try:
            with open(path) as f:
                gen = json.load(f)
        except FileNotFoundError:
            return {"source": f"none ({path} absent): vllm defaults", "params": {}}
        except (OSError, ValueError) as e:
            raise ItemFailed(f"{path} is not readable JSON ({e}): the server's sampling defaults are unknown") from None
        return {"source": path, "params": {k: gen[k] for k in SAMPLING_KEYS if k in gen}}

    def decoding(self, item: Item) -> str:
        """greedy or sampled, from what the client sends, else the server's defaults."""
        temp = item.temperature
        if temp is None:
            temp = (self.sampling or {}).get("params", {}).get("temperature", 1.0)  # vLLM's default: 1.0
        return "greedy" if float(temp) == 0.0 else f"sampled (temperature {float(temp):g})"

    def fit_prompts(self, item: Item, rec: ItemState) -> list[BenchRun]:
        """Before the model loads: every selected prompt + output_len must fit --max-model-len
        (docs/campaign.md §9: refuse, or drop). A bench cell of a sweep can ask other prompts (its `fit`).
        The item's bench runs, each on the prompts it sends."""
        if item.fit is None:
            return item.bench
        with self.owner.fit_lock:  # one check per distinct setup, never two lanes writing one file
            # with the client's backend: where the template is applied (fitcheck)
            return [self.fit_bench(replace(item.fit.of_cell(b.fit), backend=item.client.backend), b, rec)
                    for b in item.bench]

    def fit_bench(self, fit: Fit, b: BenchRun, rec: ItemState) -> BenchRun:
        """One bench run's prompts checked (one check per distinct setup); b, or b on the kept prompts."""
        key = json.dumps([self.model, fit.to_json()], sort_keys=True)
        fits = self.owner.fits
        if key not in fits:
            kept = os.path.join(self.run_dir, layout.prompts_fit(hashlib.sha256(key.encode()).hexdigest()[:12]))
            if fit.prompt_field == "messages":  # speed_bench reads <folder>/<subset>.jsonl: a folder of its own
                os.makedirs(kept + ".d", exist_ok=True)
                kept = os.path.join(kept + ".d", os.path.basename(fit.dataset))
            argv = [*fitcheck_command(os.path.join(self.spec.venv, "bin", "python")),
                    "--model", self.model, "--fit", json.dumps(fit.to_json()), "--write-kept", kept]
            try:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=self.env,
                                   cwd=self.run_dir)
                ans = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else None
            except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
                raise ItemFailed(f"the prompt-length check could not run: {e}") from None
            if ans is None and self.signalled(p.returncode):
                raise Stopped(f"stopped by SIGTERM (the prompt-length check exited with code {p.returncode})")
            if ans is None:
                raise ItemFailed(f"the prompt-length check failed (exit {p.returncode}): "
                                 f"{(p.stdout + p.stderr).strip()[-500:]}")
            ans["kept_file"] = kept
            fits[key] = ans
        ans = fits[key]
        if ans["selected"] < fit.num_prompts:
            cat = f" of category {fit.category}" if fit.category else ""
            raise ItemFailed(f"{fit.dataset} holds {ans['selected']} prompts{cat}, benchmark.num_prompts asks for "
                             f"{fit.num_prompts} (--no-oversample would send {ans['selected']}): lower num_prompts "
                             "or use a larger dataset")
        bad = ans["too_long"]
        self.owner.set(rec, prompt_fit={k: ans[k] for k in ("tokenizer", "max_model_len", "output_len", "selected",
                                                            "kept", "too_long")})
        if not bad:
            return b
        names = ", ".join(f"question_id {b['question_id']} ({b['prompt_tokens']} + {ans['output_len']} = "
                          f"{b['prompt_tokens'] + ans['output_len']} tokens)" for b in bad[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        longest = max(b["prompt_tokens"] for b in bad)
        what = (f"{len(bad)} of {ans['selected']} selected prompts do not fit --max-model-len {ans['max_model_len']} "
                f"with output_len {ans['output_len']} (tokenizer: {ans['tokenizer']}): {names}{more}")
        if fit.policy != "drop":
            raise ItemFailed(f"{what}. Fixes: raise --max-model-len to {longest + ans['output_len']} "
                             f"(server.max_model_len), lower benchmark.output_len to {ans['max_model_len'] - longest}, "
                             "or set benchmark.prompts_that_do_not_fit: drop")
        if ans["kept"] == 0:
            raise ItemFailed(f"{what}: none is left to measure")
        note = f"dropped (plan: prompts_that_do_not_fit: drop): {what}"
        if note not in rec.notes:
            rec.notes.append(note)
        return replace(b, dropped=Dropped(kept_file=ans["kept_file"], kept=ans["kept"], selected=ans["selected"],
                                          ids=[t["question_id"] for t in bad]))

    # ---------------------------------------------------------------- server
    def bench_metadata(self, item: Item) -> list[list[str]]:
        """The --metadata pairs only the worker knows (a lane on a GPU set: which GPUs measured)."""
        where = [] if self.gpus is None else [
            ["gpu_uuids", ",".join(g.uuid for g in self.gpus)], ["gpu_names", ",".join(g.name for g in self.gpus)],
            ["packing", self.spec.packing]]
        return [*where, ["generation_config", json.dumps(self.sampling or {}, sort_keys=True)],
                ["decoding", self.decoding(item)],
                *([["drafter_check", json.dumps(self.drafter, sort_keys=True)]] if self.drafter else []),
                ["engine_identity", json.dumps(self.owner.state.engine or {}, sort_keys=True, separators=(",", ":"))]]

    def server_log(self, item: Item) -> str:
        return os.path.join(self.run_dir, layout.server_log(item.server_log_name))

    def start_and_wait(self, item: Item, rec: ItemState) -> None:
        s = self.spec
        log_path = self.server_log(item)
        with open(log_path, "a") as lf:
            argv = item.serve.argv(model=self.model, host=s.server_host, port=self.port)
            self.starts += 1
            self.serve_argv, self.server_start = argv, f"{s.run_id}/{item.name}/{self.starts}"
            lf.write(f"==== specfleet {now()} run {s.run_id}: {' '.join(argv)}\n")
            lf.flush()
            self.server = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=self.env, cwd=self.run_dir,
                                           start_new_session=True)
        self.owner.set(rec, "loading", f"server pid {self.server.pid}: waiting for /health", server_pid=self.server.pid)
        url, next_poll = f"http://{s.server_host}:{self.port}/health", 0.0

        def healthy() -> bool:  # asked every health_poll_s; the server's liveness every watch step
            nonlocal next_poll
            if time.monotonic() < next_poll:
                return False
            next_poll = time.monotonic() + s.health_poll_s
            try:
                with urllib.request.urlopen(url, timeout=min(5.0, s.health_poll_s + 1)) as r:
                    return r.status == 200
            except (urllib.error.URLError, OSError):
                return False
        self.watch(item, healthy, s.health_timeout_s, lambda: f"server not healthy after {s.health_timeout_s} "
                   f"s; last lines of {log_path}:\n{tail(log_path)}")
        log(f"[{item.name}] healthy")

    def watch(self, item: Item, done, timeout_s: float, why_late) -> None:
        """Until done(): its server alive, no SIGTERM, within timeout_s (else ItemFailed(why_late()))."""
        deadline = time.monotonic() + timeout_s
        while not done():
            self.check_server(item)
            if self.owner.stopping:
                raise Stopped("stopped by SIGTERM")
            if time.monotonic() >= deadline:
                raise ItemFailed(why_late())
            time.sleep(0.2)

    def check_server(self, item: Item) -> None:
        if self.server is not None and self.server.poll() is not None:
            log_path = self.server_log(item)
            if self.signalled(self.server.returncode):
                raise Stopped(f"stopped by SIGTERM (its server had exited with code {self.server.returncode}: "
                              "a host shutdown?)")
            raise ItemFailed(f"vllm serve exited with code {self.server.returncode}; last 40 lines of "
                             f"{log_path}:\n{tail(log_path)}")

    def signalled(self, rc: int) -> bool:
        """A child ended from outside with a clean stop (0, SIGTERM, SIGINT) while the runner is stopping:
        a shutdown (reboot) or Slurm's scancel signals every process, the runner a moment later (3 s)."""
        deadline = time.monotonic() + 3.0
        while rc in (0, -signal.SIGTERM, -signal.SIGINT) and not self.owner.stopping and time.monotonic() < deadline:
            time.sleep(0.05)
        return rc in (0, -signal.SIGTERM, -signal.SIGINT) and self.owner.stopping

    def between_runs(self, item: Item, rec: ItemState) -> None:
        s = self.spec
        if s.prefix_cache == "reset":
            req = urllib.request.Request(f"http://{s.server_host}:{self.port}/reset_prefix_cache",
                                         method="POST", data=b"")
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError) as e:
                rec.notes.append(f"POST /reset_prefix_cache failed ({e}); restarted the server instead")
        if s.prefix_cache in ("reset", "fresh-server-per-concurrency"):
            self.owner.set(rec, "stopping", "restarting the server for a cold prefix cache")
            self.stop_server()
            self.start_and_wait(item, rec)
            self.owner.set(rec, "benchmarking", "")

    def requests_counter(self, rec: ItemState, client: Client, run: BenchRun):
        """The telemetry's on_server: rec["requests"], the server's finished requests since the run began
        less the client's warm-ups (fab bench's progress line)."""
        of, first = run.prompts(), []

        def on_server(m: dict) -> None:
            first[:] = first or [m.get("requests_finished")]
            done = None if None in (first[0], m.get("requests_finished")) else \
                int(min(of, max(0, m["requests_finished"] - first[0] - client.num_warmups)))
            if done is not None and (rec.requests or {}).get("done") != done:
                self.owner.set(rec, requests={"done": done, "of": of})
        return on_server

    def run_bench(self, item: Item, run: BenchRun, rec: ItemState | None = None) -> str:
        client = item.client
        final = os.path.join(client.result_dir, run.result_file)
        partial = final + layout.PARTIAL_SUFFIX
        argv = run.argv(client, model=self.model, vllm_version=self.owner.state.vllm_version,
                        host=self.spec.server_host, port=self.port, result_filename=os.path.basename(partial),
                        metadata=self.bench_metadata(item))
        if os.path.exists(partial):
            os.unlink(partial)
        log_path = os.path.join(self.run_dir, layout.bench_log(run.result_file))
        started = now()
        with open(log_path, "w") as lf:
            self.bench = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=self.env, cwd=self.run_dir, start_new_session=True)
        # the run's GPUs (a lane's set, else the spec's gpu_index, else all) and its server's /metrics;
        # telemetry never fails the run (telemetry.py)
        gpus = [g.index for g in self.gpus or []] or (None if self.spec.gpu_index is None else [self.spec.gpu_index])
        tel = sampler_for(self.spec, self.port, os.path.join(self.run_dir, layout.telemetry_file(run.result_file)),
                          self.env, gpus, on_server=self.requests_counter(rec, client, run)
                          if rec is not None and run.prompts() else None).start()
        try:
            self.watch(item, lambda: self.bench.poll() is not None, self.spec.bench_timeout_s,
                       lambda: f"bench concurrency {run.concurrency} exceeded {self.spec.bench_timeout_s} s")
        finally:
            tel.stop()
            if self.bench.poll() is None:
                kill(self.bench.pid, signal.SIGKILL, group=True)
                self.bench.wait()
        rc, self.bench, finished = self.bench.returncode, None, now()
        # the client exits 0 even when the server died under it (its requests just count as failed)
        self.check_server(item)
        if rc != 0:
            raise ItemFailed(f"vllm bench serve (concurrency {run.concurrency}) exited with code {rc}; "
                             f"last lines of {log_path}:\n{tail(log_path)}")
        try:
            with open(partial) as f:
                result = json.load(f)
        except (OSError, ValueError) as e:
            raise ItemFailed(f"bench result {partial} is missing or not JSON ({e})") from None
        if not isinstance(result, dict):
            raise ItemFailed(f"bench result {partial} is not a JSON object")
        why = failed_requests(result, run.prompts() or int(result.get("num_prompts") or 0), item.max_failed_requests)
        if why:  # the cause goes last: fab's table shows the end of the error
            raise ItemFailed(f"bench concurrency {run.concurrency} (run {run.rep}) does not count, result "
                             f"kept as {partial}, log {log_path}: {why}")
        # the record first: a result in place always has its record (the report reads the run from it)
        atomic_write(os.path.join(client.result_dir, layout.record_file(run.result_file)),
                     json.dumps(self.run_record(item, client, run, started, finished).to_json(), indent=1) + "\n")
        os.replace(partial, final)
        return final

    def acceptance_pass(self, item: Item, runs: list[BenchRun], rec: ItemState) -> None:
        """Per-request acceptance (acceptance.py) where the server runs with --per-request-spec-decode-metrics:
        after the timed runs, on the same server, the first repeat's prompts once more, untimed. It never
        fails the item (the timed results stand): a pass that could not run says why in its files."""
        level = item.serve.per_request_spec_decode_metrics
        if level in (None, "none"):
            return
        client, config = item.client, item.configuration
        log_path = os.path.join(self.run_dir, layout.acceptance_log(item.name))
        for n, s in enumerate(acceptance.prompt_set({"bench": [b.to_json() for b in runs]}), 1):
            self.owner.set(rec, phase=f"untimed acceptance pass {n}: {s['prompts']} prompts, {s['concurrency']} at "
                                      "a time", requests=None)
            p = {**s, "dataset": client.dataset_path, "custom": client.dataset_name == CUSTOM,
                 "prompt_field": item.fit and item.fit.prompt_field,
                 "base_url": f"http://{self.spec.server_host}:{self.port}", "endpoint": client.endpoint,
                 "served_name": client.served_name, "timeout_s": self.spec.bench_timeout_s,
                 "sampling": {} if client.temperature is None else {"temperature": client.temperature},
                 "client_template": self.template_on(client.backend) != "server"}
            out, started, why, got = log_path + f".{n}.json", now(), None, []
            argv = [*fitcheck_command(os.path.join(self.spec.venv, "bin", "python"), "acceptance"),
                    "--model", self.model, "--pass", json.dumps(p), "--out", out]
            with open(log_path, "a") as lf:
                proc = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env=self.env, cwd=self.run_dir, start_new_session=True)
            try:
                self.watch(item, lambda: proc.poll() is not None, self.spec.bench_timeout_s,
                           lambda: f"the untimed pass exceeded {self.spec.bench_timeout_s} s")
                with open(out) as f:
                    got = json.load(f)["requests"]
            except ItemFailed as e:  # its server died or the pass ran late
                why = str(e)
            except (OSError, ValueError, KeyError, TypeError):
                why = f"the untimed pass exited with code {proc.returncode}; last lines of {log_path}:\n{tail(log_path)}"
            finally:
                if proc.poll() is None:
                    kill(proc.pid, signal.SIGKILL, group=True)
                    proc.wait()
                if os.path.exists(out):
                    os.unlink(out)
            if why:
                rec.notes.append(f"per-request acceptance not recorded for {', '.join(s['cells'])}: {why}")
            done = {k: p[k] for k in ("prompts", "concurrency", "category", "output_len", "sampling", "endpoint",
                                      "client_template")}
            for cell, prompts in s["cells"].items():
                atomic_write(os.path.join(client.result_dir, layout.acceptance_file(config, cell)), json.dumps({
                    "specfleet_acceptance": acceptance.FILE_VERSION, "untimed": True, "node": self.spec.host,
                    "configuration": config, "cell": cell, "level": level, "engine": self.owner.state.engine,
                    "pass": {**done, "started_at": started, "finished_at": now()}, "not_recorded": why,
                    "requests": got[:prompts]}) + "\n")

    def run_record(self, item: Item, client: Client, run: BenchRun, started: str, finished: str) -> RunRecord:
        """What this bench run was, from what the lane knows; the bastion's own words (isolation) from
        the client's --metadata (commands.client_spec)."""
        d, tel = run.dropped, layout.telemetry_file(run.result_file)
        return RunRecord(
            node=self.spec.host, configuration=item.configuration, result_file=run.result_file,
            cell=RunCell(run.cell or f"conc{run.concurrency}", run.concurrency, run.output_len, run.category,
                         run.request_rate, run.num_prompts),
            repeat=run.rep if client.repeats > 1 or run.rep > 1 else None, repeats=client.repeats,
            isolation=dict(client.metadata).get("repeat_isolation"), campaign=self.spec.campaign,
            run_id=self.spec.run_id, plan_hash=self.spec.plan_hash, server_start=self.server_start,
            engine=self.owner.state.engine, serve_argv=self.serve_argv,
            gpus=None if self.gpus is None else [{"index": g.index, "uuid": g.uuid, "name": g.name} for g in self.gpus],
            packing=None if self.gpus is None else self.spec.packing,
            prompts_sent=run.prompts(), prompts_dropped=d.ids if d else [], prompts_selected=d.selected if d else None,
            sampling_sent={} if client.temperature is None else {"temperature": client.temperature}, server_sampling=self.sampling, decoding=self.decoding(item),
            bench_started_at=started, bench_finished_at=finished,
            telemetry_file=tel if os.path.exists(os.path.join(self.run_dir, tel)) else None,
            # the release the venv reports decides it; a plan that says otherwise was refused (check_template)
            chat_template=self.template_on(client.backend))

    def stop_server(self) -> None:
        p, self.server = self.server, None
        if p is None:
            return
        pgid, grace = p.pid, min(30.0, self.spec.stop_timeout_s / 2)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            kill(pgid, sig, group=True)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (p.poll() is None or any(st[2] == pgid for _, st in live_pids())):
                time.sleep(0.2)
        p.wait()
        end_pids([pid for pid, st in live_pids() if proc_argv0(pid).startswith("VLLM::")
                  and (st[3] == pgid or st[2] == pgid or proc_has_token(pid, self.token))],
                 "leftover VLLM:: processes of this run")
        used = self.wait_gpu_free(self.spec.stop_timeout_s)
        if used >= self.spec.gpu_memory_free_mib:
            raise Fatal(f"GPU memory still {used} MiB (>= {self.spec.gpu_memory_free_mib}) "
                        f"{self.spec.stop_timeout_s} s after the server stopped; not starting the next "
                        "server into an out-of-memory failure (check nvidia-smi for the holder)")
