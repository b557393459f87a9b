"""specfleet worker-side runner: one node's benchmark queue, detached from SSH. Stdlib only.

    setsid nohup python3 runner.pyz --spec /path/run.json >runner.log 2>&1 </dev/null &

Per item (skipped when `<config>.done` matches): preflight -> `vllm serve` in its own session
-> /health wait (server liveness checked every poll) -> `vllm bench serve` per concurrency ->
stop (SIGTERM group, SIGKILL group, leftover VLLM:: processes of this run, GPU memory below the
threshold). state.json (atomic) records everything. Spec schema, exit codes: docs/campaign.md.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from . import layout
from .runner_lib import (REBOOT_HINT, Fatal, ItemFailed, Stopped, atomic_write, boot_identity, end_pids, engine_identity,
                         failed_requests, gpu_used_mib, live_pids, load_spec, log, make_reserve, no_space, now,
                         parse_env_file, proc_argv0, proc_has_token, tail)
from .runspec import BenchRun, Client, Dropped, Serve
from .slots import run_slots
from .telemetry import sampler_for

# specfleet.results.schema.REQUIRED_KEYS (the runner is stdlib only and runs alone on the worker);
# a truncated file, a non-number or completed 0 is redone; the full judgement is collect's
RESULT_KEYS = ("duration", "completed", "output_throughput", "total_token_throughput", "mean_tpot_ms",
               "mean_ttft_ms", "mean_itl_ms")
EXIT_OK, EXIT_FAILED, EXIT_SPEC, EXIT_LOCKED, EXIT_FATAL, EXIT_STOPPED = 0, 1, 2, 3, 4, 143


def fitcheck_command(python: str) -> list[str]:
    """The prompt-fit check, run with the venv's python (the model's tokenizer): from the worker's
    artefact (`runner.pyz fitcheck`), or, run from a checkout, fitcheck.py beside this file."""
    here = os.path.dirname(os.path.abspath(__file__))
    artefact = os.path.dirname(here)  # <home>/runner.pyz/specfleet_worker/runner.py
    return [python, artefact, "fitcheck"] if os.path.isfile(artefact) else [python, os.path.join(here, "fitcheck.py")]


# vLLM's sampling parameters that generation_config.json can set (get_diff_sampling_param)
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
DEFAULTS = {"schema": 1, "plan_hash": "", "env_file": None, "expected_vllm_version": None,
            "server_host": "127.0.0.1", "health_timeout_s": 2400, "health_poll_s": 5,
            "prefix_cache": "reset", "bench_timeout_s": 7200, "gpu_memory_free_mib": 5000,
            "gpu_index": None, "stop_timeout_s": 120}


class Runner:
    def __init__(self, spec: dict):
        self.spec = {**DEFAULTS, **spec}
        s = self.spec
        self.run_dir = layout.run_dir(s["work_dir"], s["campaign"], s["host"])
        self.state_path = os.path.join(self.run_dir, layout.STATE)
        self.token = f"SPECFLEET_RUN_DIR={self.run_dir}".encode()
        self.server: subprocess.Popen | None = None
        self.bench: subprocess.Popen | None = None
        self.stopping = False
        self.env: dict | None = None
        self.vllm_version: str | None = None
        self.model: str | None = None
        self.state: dict = {}
        self.reserve = os.path.join(self.run_dir, layout.DISK_RESERVE)
        self.rebooted = False
        self.fits: dict[str, dict] = {}       # fit-check key -> its answer (one check per distinct setup)
        self.sampling: dict | None = None     # the server's generation defaults, read in preflight

    # ---------------------------------------------------------------- state
    def save(self) -> None:
        self.state["updated_at"] = now()
        atomic_write(self.state_path, json.dumps(self.state, indent=2) + "\n")

    def set(self, rec: dict, status: str | None = None, phase: str | None = None, **kw) -> None:
        if status:
            rec["status"] = status
        if phase is not None:
            rec["phase"] = phase
            log(f"[{rec['name']}] {status or rec['status']}: {phase}")
        rec.update(kw)
        self.save()

    def done_marker(self, item: dict) -> str:
        return os.path.join(self.run_dir, layout.done_marker(item["name"]))

    def read_marker(self, item: dict) -> dict:
        try:
            with open(self.done_marker(item)) as f:
                marker = json.load(f)
            return marker if isinstance(marker, dict) else {}
        except (OSError, ValueError):
            return {}

    def is_done(self, item: dict) -> bool:
        marker = self.read_marker(item)
        return bool(marker) and marker.get("item_hash") == item.get("item_hash") and self.results_valid(item)

    def results_valid(self, item: dict) -> bool:
        """A done marker counts only while each result file it stands for is still a complete result:
        one found corrupted or missing (collect quarantines such a copy) is measured again."""
        rdir = Client.from_json(item["client"]).result_dir
        for b in item["bench"]:
            try:
                with open(os.path.join(rdir, b["result_file"])) as f:
                    r = json.load(f)
            except (OSError, ValueError):
                r = None
            ok = isinstance(r, dict) and all(isinstance(r.get(k, 0), (int, float)) for k in RESULT_KEYS) \
                and r.get("completed", 1) > 0 and (r.get("failed") or 0) <= self.spec.get("max_failed_requests", 0)
            if not ok:
                log(f"[{item['name']}] done marker present but {b['result_file']} is missing or invalid: "
                    "measured again")
                return False
        return True

    def check_stop(self) -> None:
        if self.stopping:
            raise Stopped("stopped by SIGTERM")

    # ---------------------------------------------------------------- main loop
    def run(self) -> int:
        s = self.spec
        os.makedirs(self.run_dir, exist_ok=True)
        os.chdir(self.run_dir)  # relative paths in the spec (dataset) are relative to the run folder
        make_reserve(self.reserve)
        old, old_state = {}, {}
        try:
            with open(self.state_path) as f:
                old_state = json.load(f)
            old = {i["name"]: i for i in old_state.get("items", [])}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        old_state = old_state if isinstance(old_state, dict) else {}
        boot = boot_identity()
        self.rebooted = bool(old_state.get("boot")) and old_state.get("boot") != boot
        self.state = {"schema": 1, "run_id": s["run_id"], "campaign": s["campaign"],
                      "plan_hash": s["plan_hash"], "host": s["host"], "runner_pid": os.getpid(),
                      "status": "running", "started_at": now(), "finished_at": None, "error": None,
                      "vllm_version": None, "model_path": None, "current": None, "boot": boot,
                      "rebooted": REBOOT_HINT if self.rebooted else None, "items": []}
        for it in s["items"]:
            done = self.is_done(it)
            rec = {"name": it["name"], "item_hash": it.get("item_hash"),
                   "status": "done" if done else "pending", "phase": "done earlier" if done else "",
                   "attempts": old.get(it["name"], {}).get("attempts", 0), "started_at": None,
                   "finished_at": None, "error": None, "server_pid": None, "results": [], "notes": []}
            if done:  # keep what the earlier run recorded (the done marker is the authority)
                prev, marker = old.get(it["name"], {}), self.read_marker(it)
                rec.update({k: prev[k] for k in ("started_at", "server_pid", "model_path", "notes") if k in prev},
                           finished_at=marker.get("finished_at"), results=marker.get("results", []))
            elif self.rebooted and old.get(it["name"], {}).get("status") not in (None, "pending", "failed", "done") \
                    or self.rebooted and "SIGTERM" in str(old.get(it["name"], {}).get("error")):
                prev = old[it["name"]]
                rec["interrupted"] = ("host rebooted while it ran (the shutdown stopped it)" if prev["status"] == "pending"
                                      else f"host rebooted during {prev['status']} ({prev.get('phase') or ''})")
            elif old.get(it["name"], {}).get("interrupted"):  # keep the record until the item is done
                rec["interrupted"] = old[it["name"]]["interrupted"]
            self.state["items"].append(rec)
        self.save()
        log(f"runner pid {os.getpid()} run {s['run_id']}: {len(s['items'])} items in {self.run_dir}")
        self.end_previous_leftovers()
        if s.get("gpus"):  # a node with several GPUs: servers on disjoint GPU sets (slots.py)
            return run_slots(self)
        rc = EXIT_OK
        for item, rec in self.queue():
            if rec["status"] == "done":
                log(f"[{item['name']}] done marker present: skipped")
                continue
            try:
                self.check_stop()
                self.state["current"] = item["name"]
                rec.update(attempts=rec["attempts"] + 1, started_at=now(), error=None, notes=[])
                self.run_item(item, rec)
            except ItemFailed as e:
                rc = EXIT_FAILED
                msg = f"{e}; {REBOOT_HINT}" if self.rebooted and rec["status"] == "preflight" else str(e)
                self.set(rec, "failed", f"failed during {rec['status']}", error=msg, finished_at=now())
            except Stopped as e:
                self.set(rec, "pending", "interrupted by SIGTERM; redone on resume", error=str(e))
                self.finish("stopped", "stopped by SIGTERM")
                return EXIT_STOPPED
            except Fatal as e:
                self.set(rec, "failed", "queue stopped", error=str(e), finished_at=now())
                self.finish("failed", f"queue stopped at {item['name']}: {e}")
                return EXIT_FATAL
        self.finish("done" if rc == EXIT_OK else "failed",
                    None if rc == EXIT_OK else "some items failed (see items[].error)")
        return rc

    def queue(self):
        """The spec's items in order; where they run dry, the crossover search's next round, if the
        plan has one (crossover.py: the new items are appended to the spec and the state)."""
        i, rounds, tried = 0, 1, {}
        while True:
            while i < len(self.spec["items"]):
                yield self.spec["items"][i], self.state["items"][i]
                i += 1
            if not self.spec.get("crossover") or self.stopping:
                return
            rounds += 1
            from .crossover import crossover_round
            more, decision = crossover_round(self.spec, self.run_dir, tried, rounds)
            self.state["crossover"] = {"round": rounds, "configs": decision}
            for cfg, d in decision.items():
                log(f"[crossover] {cfg}: {d['why']}; next: {d['next'] or 'none'}")
            if not more:
                self.save()
                return
            for it in more:
                self.spec["items"].append(it)
                self.state["items"].append({"name": it["name"], "item_hash": it["item_hash"], "status": "pending",
                                            "phase": f"crossover round {rounds}", "attempts": 0, "started_at": None,
                                            "finished_at": None, "error": None, "server_pid": None, "results": [],
                                            "notes": []})
            self.save()

    def abort(self, e: BaseException) -> None:
        """Whatever ends the runner ends its server and bench client too, and says why."""
        for p in (self.bench, self.server):
            if p is not None and p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        try:
            self.stop_server()
        except BaseException as stop_error:  # noqa: BLE001 - record the first cause, still end the rest
            log(f"while aborting: {stop_error}")
        self.end_previous_leftovers()  # by run token: a bench client, an engine
        why = no_space(e, self.run_dir) or f"runner crashed: {type(e).__name__}: {e}"
        try:
            os.unlink(self.reserve)  # frees room on a full disk for the last state
        except OSError:
            pass
        cur = next((r for r in self.state.get("items", []) if r["name"] == self.state.get("current")), None)
        if cur is not None and cur["status"] != "done":
            cur.update(status="failed", phase="queue stopped", error=why, finished_at=now())
        try:
            self.finish("failed", why)
        except OSError as e2:
            log(f"cannot record the state ({e2}): {why}")
        try:
            print(f"specfleet runner: {why}", file=sys.stderr, flush=True)
        except OSError:
            pass

    def finish(self, status: str, error: str | None) -> None:
        self.state.update(status=status, error=error, finished_at=now(), current=None)
        self.save()
        log(f"runner {status}" + (f": {error}" if error else ""))

    def run_item(self, item: dict, rec: dict) -> None:
        self.set(rec, "preflight", "checking GPU, port, model, venv, env file, prompt lengths")
        self.preflight(item)
        rec["model_path"] = self.model
        item = self.fit_prompts(item, rec)
        try:
            self.start_and_wait(item, rec)
            self.set(rec, "benchmarking", "")
            for i, b in enumerate(item["bench"]):
                if i > 0:
                    self.between_runs(item, rec)
                self.set(rec, phase=f"bench {b.get('cell') or 'concurrency ' + str(b['concurrency'])} "
                                    f"(run {i + 1}/{len(item['bench'])})")
                rec["results"].append(self.run_bench(item, b))
                self.save()
        finally:
            if self.server is not None:
                try:
                    self.set(rec, "stopping", "stopping server, waiting for GPU memory")
                finally:  # even when the state cannot be written (full disk): the server ends
                    self.stop_server()
        marker = {"item_hash": item.get("item_hash"), "run_id": self.spec["run_id"],
                  "plan_hash": self.spec["plan_hash"], "finished_at": now(), "results": rec["results"]}
        atomic_write(self.done_marker(item), json.dumps(marker, indent=2) + "\n")
        self.set(rec, "done", "done", finished_at=now())

    # ---------------------------------------------------------------- preflight
    def gpu_used_mib(self) -> int:
        return gpu_used_mib(self.spec["gpu_index"], self.env)

    def wait_gpu_free(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while True:
            used = self.gpu_used_mib()
            if used < self.spec["gpu_memory_free_mib"] or time.monotonic() >= deadline:
                return used
            time.sleep(1.0)

    def preflight(self, item: dict) -> None:
        s = self.spec
        env = dict(os.environ)
        if s["env_file"]:
            if not os.path.isfile(s["env_file"]):
                raise ItemFailed(f"env file {s['env_file']} is missing")
            env = parse_env_file(s["env_file"], env)
        venv_bin = os.path.join(s["venv"], "bin")
        env.update(VIRTUAL_ENV=s["venv"], PATH=f"{venv_bin}:{env.get('PATH', '/usr/bin:/bin')}",
                   SPECFLEET_RUN_ID=s["run_id"], SPECFLEET_RUN_DIR=self.run_dir)
        if s["prefix_cache"] == "reset":
            env["VLLM_SERVER_DEV_MODE"] = "1"  # exposes POST /reset_prefix_cache
        self.env = env
        used = self.wait_gpu_free(min(30.0, s["stop_timeout_s"]))
        if used >= s["gpu_memory_free_mib"]:
            raise ItemFailed(f"GPU memory used {used} MiB >= {s['gpu_memory_free_mib']} MiB before start: "
                             "another process holds the GPU")
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((s["server_host"], int(s["port"])))
            except OSError as e:
                raise ItemFailed(f"port {s['port']} on {s['server_host']} is in use ({e.strerror}): "
                                 "a leftover server?") from None
        self.model = next((d for d in s["model_candidates"]
                           if os.access(os.path.join(d, "config.json"), os.R_OK)), None)
        if not self.model:
            raise ItemFailed("no readable model directory (with config.json) among: "
                             + ", ".join(s["model_candidates"]))
        self.state["model_path"] = self.model
        for path in item.get("required_paths", []):
            if not os.access(path, os.R_OK):
                raise ItemFailed(f"required file {path} is not readable")
        vllm = os.path.join(venv_bin, "vllm")
        if not os.access(vllm, os.X_OK):
            raise ItemFailed(f"{vllm} is missing or not executable: is {s['venv']} a vLLM venv?")
        if self.vllm_version is None:  # from the package metadata: importing vLLM would take ~20 s
            ident = engine_identity(os.path.join(venv_bin, "python"), env)
            version = ident["version"]
            want = s["expected_vllm_version"]
            if want and version != want:
                raise ItemFailed(f"the venv has vLLM {version}, the plan pins {want}")
            self.vllm_version = self.state["vllm_version"] = version
            self.state["engine"] = ident  # shared with a GPU lane's copy: every result carries it
        self.sampling = self.server_sampling(item)

    def server_sampling(self, item: dict) -> dict:
        """The sampling defaults the server applies to what the client does not send.

        vLLM's --generation-config: `auto` (default) = the model's generation_config.json, `vllm` =
        none (vLLM's own defaults: temperature 1.0), a folder = that folder's file.
        """
        argv = Serve.from_json(item["serve"]).options()
        src = next((w.split("=", 1)[1] for w in argv if w.startswith("--generation-config=")), None)
        if src is None and "--generation-config" in argv[:-1]:
            src = argv[argv.index("--generation-config") + 1]
        src = src or "auto"
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

    def decoding(self, item: dict) -> str:
        """greedy or sampled, from what the client sends, else the server's defaults."""
        temp = item.get("temperature", 0.0)
        if temp is None:
            temp = (self.sampling or {}).get("params", {}).get("temperature", 1.0)  # vLLM's default: 1.0
        return "greedy" if float(temp) == 0.0 else f"sampled (temperature {float(temp):g})"

    def fit_prompts(self, item: dict, rec: dict) -> dict:
        """Before the model loads: every selected prompt + output_len must fit --max-model-len.

        refuse: the item fails naming the prompts and the fixes. drop: the bench runs get a file of
        the prompts that fit (selection order, --disable-shuffle, --num-prompts = how many).
        A bench cell of a sweep can ask other prompts (its `fit`: category, num_prompts, output_len).
        """
        if not item.get("fit"):
            return item
        return dict(item, bench=[self.fit_bench({**item["fit"], **(b.get("fit") or {})}, b, rec)
                                 for b in item["bench"]])

    def fit_bench(self, fit: dict, b: dict, rec: dict) -> dict:
        """One bench run's prompts checked (one check per distinct setup); b, or b on the kept prompts."""
        key = json.dumps([self.model, fit], sort_keys=True)
        if key not in self.fits:
            kept = os.path.join(self.run_dir, layout.prompts_fit(hashlib.sha256(key.encode()).hexdigest()[:12]))
            argv = [*fitcheck_command(os.path.join(self.spec["venv"], "bin", "python")),
                    "--model", self.model, "--dataset", fit["dataset"], "--num-prompts", str(fit["num_prompts"]),
                    "--output-len", str(fit["output_len"]), "--chat-template", fit["chat_template"],
                    "--write-kept", kept]
            if fit.get("category"):
                argv += ["--category", fit["category"]]
            if fit.get("max_model_len"):
                argv += ["--max-model-len", str(fit["max_model_len"])]
            try:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=self.env,
                                   cwd=self.run_dir)
                ans = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else None
            except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
                raise ItemFailed(f"the prompt-length check could not run: {e}") from None
            if ans is None:
                raise ItemFailed(f"the prompt-length check failed (exit {p.returncode}): "
                                 f"{(p.stdout + p.stderr).strip()[-500:]}")
            ans["kept_file"] = kept
            self.fits[key] = ans
        ans = self.fits[key]
        if ans["selected"] < fit["num_prompts"]:
            cat = f" of category {fit['category']}" if fit.get("category") else ""
            raise ItemFailed(f"{fit['dataset']} holds {ans['selected']} prompts{cat}, benchmark.num_prompts asks for "
                             f"{fit['num_prompts']} (--no-oversample would send {ans['selected']}): lower num_prompts "
                             "or use a larger dataset")
        bad = ans["too_long"]
        rec["prompt_fit"] = {k: ans[k] for k in ("tokenizer", "max_model_len", "output_len", "selected", "kept")}
        rec["prompt_fit"]["too_long"] = bad
        if not bad:
            return b
        names = ", ".join(f"question_id {b['question_id']} ({b['prompt_tokens']} + {ans['output_len']} = "
                          f"{b['prompt_tokens'] + ans['output_len']} tokens)" for b in bad[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        longest = max(b["prompt_tokens"] for b in bad)
        what = (f"{len(bad)} of {ans['selected']} selected prompts do not fit --max-model-len {ans['max_model_len']} "
                f"with output_len {ans['output_len']} (tokenizer: {ans['tokenizer']}): {names}{more}")
        if fit["policy"] != "drop":
            raise ItemFailed(f"{what}. Fixes: raise --max-model-len to {longest + ans['output_len']} "
                             f"(server.args), lower benchmark.output_len to {ans['max_model_len'] - longest}, "
                             "or set benchmark.prompts_that_do_not_fit: drop")
        if ans["kept"] == 0:
            raise ItemFailed(f"{what}: none is left to measure")
        note = f"dropped (plan: prompts_that_do_not_fit: drop): {what}"
        if note not in rec["notes"]:
            rec["notes"].append(note)
        return dict(b, dropped=Dropped(kept_file=ans["kept_file"], kept=ans["kept"], selected=ans["selected"],
                                       ids=[t["question_id"] for t in bad]).to_json())

    # ---------------------------------------------------------------- server
    def serve_argv(self, item: dict) -> list[str]:
        return Serve.from_json(item["serve"]).argv(model=self.model, host=self.spec["server_host"],
                                                   port=int(self.spec["port"]))

    def bench_metadata(self, item: dict) -> list[list[str]]:
        """The --metadata pairs only the worker knows (a GPU lane adds its GPUs)."""
        return [["generation_config", json.dumps(self.sampling or {}, sort_keys=True)],
                ["decoding", self.decoding(item)],
                ["engine_identity", json.dumps(self.state.get("engine") or {}, sort_keys=True, separators=(",", ":"))]]

    def start_and_wait(self, item: dict, rec: dict) -> None:
        s = self.spec
        log_path = os.path.join(self.run_dir, layout.server_log(item.get("log_name", item["name"])))
        with open(log_path, "a") as lf:
            argv = self.serve_argv(item)
            lf.write(f"==== specfleet {now()} run {s['run_id']}: {' '.join(argv)}\n")
            lf.flush()
            self.server = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=self.env, cwd=self.run_dir,
                                           start_new_session=True)
        self.set(rec, "loading", f"server pid {self.server.pid}: waiting for /health", server_pid=self.server.pid)
        url = f"http://{s['server_host']}:{s['port']}/health"
        deadline = time.monotonic() + s["health_timeout_s"]
        while True:
            try:
                with urllib.request.urlopen(url, timeout=min(5.0, s["health_poll_s"] + 1)) as r:
                    if r.status == 200:
                        log(f"[{item['name']}] healthy")
                        return
            except (urllib.error.URLError, OSError):
                pass
            next_poll = time.monotonic() + s["health_poll_s"]
            while time.monotonic() < next_poll:
                self.check_server(item)
                self.check_stop()
                if time.monotonic() >= deadline:
                    raise ItemFailed(f"server not healthy after {s['health_timeout_s']} s; last lines of "
                                     f"{log_path}:\n{tail(log_path)}")
                time.sleep(0.2)

    def check_server(self, item: dict) -> None:
        if self.server is not None and self.server.poll() is not None:
            log_path = os.path.join(self.run_dir, layout.server_log(item.get("log_name", item["name"])))
            if self.server.returncode in (0, -signal.SIGTERM, -signal.SIGINT):
                # ended from outside with a clean stop: a shutdown (reboot) signals us too, a moment later
                deadline = time.monotonic() + 3.0
                while not self.stopping and time.monotonic() < deadline:
                    time.sleep(0.05)
                if self.stopping:
                    raise Stopped(f"stopped by SIGTERM (its server had exited with code {self.server.returncode}: "
                                  "a host shutdown?)")
            raise ItemFailed(f"vllm serve exited with code {self.server.returncode}; last 40 lines of "
                             f"{log_path}:\n{tail(log_path)}")

    def between_runs(self, item: dict, rec: dict) -> None:
        s = self.spec
        if s["prefix_cache"] == "reset":
            req = urllib.request.Request(f"http://{s['server_host']}:{s['port']}/reset_prefix_cache",
                                         method="POST", data=b"")
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError) as e:
                rec["notes"].append(f"POST /reset_prefix_cache failed ({e}); restarted the server instead")
        if s["prefix_cache"] in ("reset", "fresh-server-per-concurrency"):
            self.set(rec, "stopping", "restarting the server for a cold prefix cache")
            self.stop_server()
            self.start_and_wait(item, rec)
            self.set(rec, "benchmarking", "")

    def run_bench(self, item: dict, b: dict) -> str:
        client, run = Client.from_json(item["client"]), BenchRun.from_json(b)
        final = os.path.join(client.result_dir, run.result_file)
        partial = final + layout.PARTIAL_SUFFIX
        argv = run.argv(client, model=self.model, vllm_version=self.vllm_version, host=self.spec["server_host"],
                        port=int(self.spec["port"]), result_filename=os.path.basename(partial),
                        metadata=self.bench_metadata(item))
        if os.path.exists(partial):
            os.unlink(partial)
        log_path = os.path.join(self.run_dir, layout.bench_log(b["result_file"]))
        with open(log_path, "w") as lf:
            self.bench = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=self.env, cwd=self.run_dir, start_new_session=True)
        tel = self.telemetry(b["result_file"]).start()  # never fails the run (telemetry.py)
        deadline = time.monotonic() + self.spec["bench_timeout_s"]
        try:
            while self.bench.poll() is None:
                self.check_server(item)
                self.check_stop()
                if time.monotonic() > deadline:
                    raise ItemFailed(f"bench concurrency {b['concurrency']} exceeded {self.spec['bench_timeout_s']} s")
                time.sleep(0.2)
        finally:
            tel.stop()
            if self.bench.poll() is None:
                try:
                    os.killpg(self.bench.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.bench.wait()
        rc, self.bench = self.bench.returncode, None
        # the client exits 0 even when the server died under it (its requests just count as failed)
        self.check_server(item)
        if rc != 0:
            raise ItemFailed(f"vllm bench serve (concurrency {b['concurrency']}) exited with code {rc}; "
                             f"last lines of {log_path}:\n{tail(log_path)}")
        try:
            with open(partial) as f:
                result = json.load(f)
        except (OSError, ValueError) as e:
            raise ItemFailed(f"bench result {partial} is missing or not JSON ({e})") from None
        if not isinstance(result, dict):
            raise ItemFailed(f"bench result {partial} is not a JSON object")
        why = failed_requests(result, run.prompts() or int(result.get("num_prompts") or 0),
                              int(item.get("max_failed_requests", 0)))
        if why:  # the cause goes last: fab's table shows the end of the error
            raise ItemFailed(f"bench concurrency {b['concurrency']} (run {b.get('rep', 1)}) does not count, result "
                             f"kept as {partial}, log {log_path}: {why}")
        os.replace(partial, final)
        return final

    def telemetry(self, result_file: str):
        """The run's GPUs (a lane's set, else the spec's gpu_index, else all) and its server's /metrics."""
        gpus = [g["index"] for g in getattr(self, "gpus", None) or []] or (
            None if self.spec.get("gpu_index") is None else [self.spec["gpu_index"]])
        return sampler_for(self.spec, os.path.join(self.run_dir, layout.telemetry_file(result_file)), self.env, gpus)

    def stop_server(self) -> None:
        p, self.server = self.server, None
        if p is None:
            return
        pgid, grace = p.pid, min(30.0, self.spec["stop_timeout_s"] / 2)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (p.poll() is None or self.group_alive(pgid)):
                time.sleep(0.2)
        p.wait()
        left = [pid for pid, st in live_pids() if proc_argv0(pid).startswith("VLLM::")
                and (st[3] == pgid or st[2] == pgid or proc_has_token(pid, self.token))]
        if left:
            log(f"ending leftover VLLM:: processes of this run by PID: {left}")
            end_pids(left)
        used = self.wait_gpu_free(self.spec["stop_timeout_s"])
        if used >= self.spec["gpu_memory_free_mib"]:
            raise Fatal(f"GPU memory still {used} MiB (>= {self.spec['gpu_memory_free_mib']}) "
                        f"{self.spec['stop_timeout_s']} s after the server stopped; not starting the next "
                        "server into an out-of-memory failure (check nvidia-smi for the holder)")

    @staticmethod
    def group_alive(pgid: int) -> bool:
        return any(st[2] == pgid for _, st in live_pids())

    def end_previous_leftovers(self) -> None:
        """After a runner crash or kill: end what an earlier runner of this run dir left."""
        left = [pid for pid, _ in live_pids() if proc_has_token(pid, self.token)]
        if left:
            log(f"ending processes an earlier runner left (by PID): {left}")
            end_pids(left)

    def on_sigterm(self, signum, frame) -> None:
        log(f"signal {signum}: stopping after cleaning up the current server")
        self.stopping = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True, help="run spec JSON written by the bastion")
    args = ap.parse_args(argv)
    try:
        spec = load_spec(args.spec)
    except (OSError, ValueError) as e:
        print(f"specfleet runner: bad run spec {args.spec}: {e}", file=sys.stderr)
        return EXIT_SPEC
    os.makedirs(spec["work_dir"], exist_ok=True)
    lock_path = layout.lock_path(spec["work_dir"])
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
        print(f"specfleet runner: another runner holds {lock_path} ({holder}); "
              "use `fab stop` or wait for it to finish", file=sys.stderr)
        return EXIT_LOCKED
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid={os.getpid()} run_id={spec['run_id']}\n".encode(), 0)
    runner = Runner(spec)
    signal.signal(signal.SIGTERM, runner.on_sigterm)
    signal.signal(signal.SIGINT, runner.on_sigterm)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        return runner.run()
    except Exception as e:  # noqa: BLE001 - a full disk, a bug: never leave a server holding the GPU
        runner.abort(e)
        return EXIT_FATAL
