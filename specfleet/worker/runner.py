"""The worker's runner: one node's benchmark queue, detached from SSH. Stdlib only.

    setsid nohup python3 runner.pyz --spec /path/run.json >runner.log 2>&1 </dev/null &

The Runner owns the queue, state.json and the done markers and runs each item in a Lane (lane.py);
what an item's end means for the queue is decided in one place, Runner.ended. The design:
docs/dev/worker.md; the spec's keys and the exit codes: docs/campaign.md §5.
"""
from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import signal
import sys
import threading
import time
from contextlib import suppress

from . import layout
from .host import (Fatal, ItemFailed, Stopped, atomic_write, boot_identity, end_pids, env_without_devices, gpu_table,
                   live_pids, log, now, proc_has_token)
from .lane import Lane
from .runspec import Gpu, Item, ItemState, RunSpec, RunState, SpecError
from .slots import admit, check_gpus, fits_ever

EXIT_OK, EXIT_FAILED, EXIT_SPEC, EXIT_LOCKED, EXIT_FATAL, EXIT_STOPPED = 0, 1, 2, 3, 4, 143
# every result's required keys, here and in collect's schema (resultfile/schema.py): the runner redoes
# a truncated file, a non-number or completed 0; the full judgement is collect's
RESULT_KEYS = ("duration", "completed", "output_throughput", "total_token_throughput", "mean_tpot_ms",
               "mean_ttft_ms", "mean_itl_ms")
RUNNING_STATUSES = ("preflight", "loading", "benchmarking", "stopping")
POLL_S = 0.2  # how often the pool looks for a finished server and a free GPU set

REBOOT_HINT = ("the host rebooted since this campaign's last runner (boot id changed): run `fab provision` "
               "(mounts, GPU modules), then `fab bench` to resume")
RESERVE_BYTES = 1 << 20  # held on the run folder's file system, so a full disk can still record why


class Runner:
    """The queue's owner: the spec, state.json and its saving (under `lock`), the done markers, the
    crossover rounds, and the pool that runs each item in a Lane on a free GPU set."""

    def __init__(self, spec: RunSpec):
        self.spec = s = spec
        self.run_dir = layout.run_dir(s.work_dir, s.campaign, s.host)
        self.state_path = os.path.join(self.run_dir, layout.STATE)
        self.token = f"SPECFLEET_RUN_DIR={self.run_dir}".encode()
        self.reserve = os.path.join(self.run_dir, layout.DISK_RESERVE)
        self.state: RunState | None = None
        self.lock, self.fit_lock = threading.RLock(), threading.Lock()
        self.fits: dict[str, dict] = {}        # fit-check key -> its answer (one check per distinct setup)
        self.stopping = False
        self.rebooted = False
        self.items: list[Item] = list(s.items)  # the queue: the spec's items, then the crossover rounds'
        self.lanes: dict[str, Lane] = {}       # item name -> the lane running it
        self.held: dict = {}                   # GPU index (None: the one-GPU node) -> why it is kept out
        self.tried: dict[str, set[int]] = {}   # the crossover search's concurrencies given out so far
        self.rounds = 1

    # ---------------------------------------------------------------- state
    def save(self) -> None:
        with self.lock:
            self.state.updated_at = now()
            atomic_write(self.state_path, json.dumps(self.state.to_json(), indent=2) + "\n")

    def set(self, rec: ItemState, status: str | None = None, phase: str | None = None, **kw) -> None:
        with self.lock:
            if status:
                rec.status = status
            if phase is not None:
                rec.phase = phase
                log(f"[{rec.name}] {status or rec.status}: {phase}")
            for k, v in kw.items():
                if not hasattr(rec, k):
                    raise AttributeError(f"an item's record has no field {k}")
                setattr(rec, k, v)
            self.save()

    def finish(self, status: str, error: str | None) -> None:
        with self.lock:
            st = self.state
            st.status, st.error, st.finished_at, st.current = status, error, now(), None
            self.save()
        log(f"runner {status}" + (f": {error}" if error else ""))

    def write_marker(self, item: Item, marker: dict) -> None:
        atomic_write(os.path.join(self.run_dir, layout.done_marker(item.name)), json.dumps(marker, indent=2) + "\n")

    def done_marker(self, item: Item) -> dict | None:
        """The item's done marker while it holds (the item's hash, its results still valid), else None."""
        try:
            with open(os.path.join(self.run_dir, layout.done_marker(item.name))) as f:
                marker = json.load(f)
        except (OSError, ValueError):
            return None
        ok = isinstance(marker, dict) and marker and marker.get("item_hash") == item.item_hash
        return marker if ok and self.results_valid(item) else None

    def results_valid(self, item: Item) -> bool:
        """A done marker counts only while each result file it stands for is still a complete result:
        one found corrupted or missing (collect quarantines such a copy) is measured again."""
        for b in item.bench:
            try:
                with open(os.path.join(item.client.result_dir, b.result_file)) as f:
                    r = json.load(f)
            except (OSError, ValueError):
                r = None
            nums = [r.get(k, 0) for k in RESULT_KEYS] + [r.get("failed") or 0] if isinstance(r, dict) else [None]
            ok = all(isinstance(v, (int, float)) for v in nums) \
                and r.get("completed", 1) > 0 and (r.get("failed") or 0) <= item.max_failed_requests
            if not ok:
                log(f"[{item.name}] done marker present but {b.result_file} is missing or invalid: "
                    "measured again")
                return False
        return True

    def load_state(self) -> None:
        """state.json for this start: the earlier runner's records where they still hold."""
        s, old, old_state = self.spec, {}, {}
        try:
            with open(self.state_path) as f:
                old_state = json.load(f)
            old = {i["name"]: i for i in old_state.get("items", [])}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        old_state = old_state if isinstance(old_state, dict) else {}
        boot = boot_identity()
        self.rebooted = bool(old_state.get("boot")) and old_state.get("boot") != boot
        self.state = RunState(run_id=s.run_id, campaign=s.campaign, plan_hash=s.plan_hash, host=s.host,
                              runner_pid=os.getpid(), started_at=now(), boot=boot,
                              rebooted=REBOOT_HINT if self.rebooted else None, items=[])
        for it in s.items:
            marker, prev = self.done_marker(it), old.get(it.name, {})
            prev = prev if isinstance(prev, dict) else {}
            done = marker is not None
            rec = ItemState.new(it.name, it.item_hash, "done earlier" if done else "")
            n = prev.get("attempts")  # the earlier runner's record: a damaged one is not a crash
            rec.status, rec.attempts = "done" if done else "pending", n if type(n) is int else 0
            if done:  # keep what the earlier run recorded (the done marker is the authority)
                for k, kind in (("started_at", str), ("server_pid", int), ("model_path", str), ("notes", list)):
                    if isinstance(prev.get(k), kind):
                        setattr(rec, k, prev[k])
                results = marker.get("results")
                rec.finished_at, rec.results = marker.get("finished_at"), results if isinstance(results, list) else []
            elif self.rebooted and prev.get("status") not in (None, "pending", "failed", "done") \
                    or self.rebooted and "SIGTERM" in str(prev.get("error")):
                rec.interrupted = ("host rebooted while it ran (the shutdown stopped it)"
                                   if prev.get("status") in (None, "pending")
                                   else f"host rebooted during {prev['status']} ({prev.get('phase') or ''})")
            elif prev.get("interrupted"):  # keep the record until the item is done
                rec.interrupted = str(prev["interrupted"])
            self.state.items.append(rec)
        self.save()

    # ---------------------------------------------------------------- the queue
    def run(self) -> int:
        s = self.spec
        os.makedirs(self.run_dir, exist_ok=True)
        os.chdir(self.run_dir)  # relative paths in the spec (dataset) are relative to the run folder
        try:
            with open(self.reserve, "wb") as f:
                f.write(b"\0" * RESERVE_BYTES)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            pass
        self.load_state()
        log(f"runner pid {os.getpid()} run {s.run_id}: {len(s.items)} items in {self.run_dir}")
        self.end_previous_leftovers()
        gpus = None
        if s.gpus:  # a node with several GPUs: servers on disjoint GPU sets
            try:
                gpus = check_gpus(s.gpus, gpu_table(env_without_devices(None)))
            except (ValueError, ItemFailed) as e:
                self.finish("failed", f"the node's GPUs: {e}")
                return EXIT_SPEC
            self.state.gpus, self.state.packing = gpus, s.packing
        todo = [(it, rec) for it, rec in zip(self.items, self.state.items) if rec.status != "done"]
        for it, rec in zip(self.items, self.state.items):
            if rec.status == "done":
                log(f"[{it.name}] done marker present: skipped")
        return self.pool(todo, gpus)

    def next_round(self) -> list[tuple[Item, ItemState]]:
        """The crossover search's next round, if the plan has one (crossover.py: its items are
        appended to the spec and the state). It reads what every finished server measured, so the
        pool asks only when no server runs. [] when the search is done."""
        if self.spec.crossover is None:
            return []
        from .crossover import crossover_round
        self.rounds += 1
        more, decision = crossover_round(self.spec.crossover, self.items, self.run_dir, self.tried, self.rounds)
        self.state.crossover = {"round": self.rounds, "configs": decision}
        for cfg, d in decision.items():
            log(f"[crossover] {cfg}: {d['why']}; next: {d['next'] or 'none'}")
        out = [(it, ItemState.new(it.name, it.item_hash, f"crossover round {self.rounds}")) for it in more]
        self.items += [it for it, _ in out]
        self.state.items += [rec for _, rec in out]
        self.save()
        return out

    def pool(self, todo: list[tuple[Item, ItemState]], gpus: list[Gpu] | None) -> int:
        """Run `todo` ((item, rec) in queue order): at each moment every pending item that the
        admission rule (slots.admit) places starts in its own Lane; `gpus` None: one slot, the node as
        the one-GPU runner sees it. The runner's exit code."""
        s, pending, finished = self.spec, list(todo), []
        by_index = {g.index: g for g in gpus or []}
        indices = list(by_index) if gpus else [None]
        groups, exclusive = s.gpu_groups, s.exclusive
        busy: dict[str, list] = {}     # item name -> the GPU indices it holds
        crash: BaseException | None = None
        stopped_at = None
        while True:
            while finished:
                item, rec, outcome = finished.pop(0)
                used = busy.pop(item.name)
                why = self.ended(item, rec, outcome)
                if outcome is not None and not isinstance(outcome, (ItemFailed, Stopped, Fatal)):
                    crash = crash or outcome   # a runner bug, a full disk: the others stop, then the runner
                    self.stopping = True
                elif why:
                    self.held.update({i: why for i in used})
                    if set(self.held) >= set(indices):   # nothing left to run on: the queue stops here
                        stopped_at = stopped_at or f"queue stopped at {item.name}: {why}"
                        self.stopping = True
                self.note_running()
            if not pending and not busy:
                # after SIGTERM too: a search with rounds left is stopped, its next round pending, not done
                more = [] if crash is not None or stopped_at else self.next_round()
                if not more:
                    break
                pending += more
            if self.stopping:
                if not busy:
                    break
            else:
                for item, rec in list(pending):
                    if exclusive and busy:
                        break
                    got, why = self.place(item, indices, groups, busy)
                    if why:
                        pending.remove((item, rec))
                        self.set(rec, "failed", "no GPU set", attempts=rec.attempts + 1, started_at=now(),
                                 finished_at=now(), error=why)
                    elif got is not None:
                        pending.remove((item, rec))
                        self.start(item, rec, got, by_index, finished)
                        busy[item.name] = got
            time.sleep(POLL_S)
        if crash is not None:
            raise crash
        if stopped_at:
            self.finish("failed", stopped_at)
            return EXIT_FATAL
        if self.stopping and any(rec.status == "pending" for rec in self.state.items):
            self.finish("stopped", "stopped by SIGTERM")
            return EXIT_STOPPED
        if self.held:
            held = "; ".join(f"GPU {i}: {w}" for i, w in sorted(self.held.items()))
            self.finish("failed", f"GPU memory not released, these GPUs were kept out: {held}")
            return EXIT_FATAL
        failed = any(rec.status == "failed" for rec in self.state.items)
        self.finish("failed" if failed else "done", "some items failed (see items[].error)" if failed else None)
        return EXIT_FAILED if failed else EXIT_OK

    def place(self, item: Item, indices: list, groups, busy: dict) -> tuple[list | None, str | None]:
        """(the GPU set the item starts on now, None) / (None, None): it waits / (None, why): it never can."""
        if indices == [None]:   # the one-GPU node: one slot
            return ([None], None) if not busy and None not in self.held else (None, None)
        need = max(item.serve.gpus_needed(), len(indices) if item.whole_node else 1)
        ok = [i for i in indices if i not in self.held]
        pin = item.gpu_pin   # equivalence.every_gpu: the baseline's run on this GPU
        if pin is not None and pin not in ok:
            return None, f"pinned to GPU {pin}, which is " + (
                f"kept out: {self.held[pin]}" if pin in self.held else f"not one of the node's GPUs {indices}")
        if pin is None and not fits_ever(need, ok, groups):
            held = "; ".join(f"GPU {i}: {w}" for i, w in sorted(self.held.items()))
            return None, (f"needs {need} GPU(s) in one group; the node has {len(indices)}"
                          + (f", kept out: {held}" if held else "") + (f" (gpu_groups {groups})" if groups else ""))
        taken = {i for used in busy.values() for i in used} | set(self.held)
        return admit(need, pin, [i for i in indices if i not in taken], groups), None

    def start(self, item: Item, rec: ItemState, got: list, by_index: dict, finished: list) -> None:
        """The item's Lane on `got`, in its own thread; its end is appended to `finished`."""
        gpus = None if got == [None] else [by_index[i] for i in got][:item.serve.gpus_needed()]
        lane = Lane(self, gpus, self.spec.port + (gpus[0].index if gpus else 0))
        with self.lock:  # a record changes under the lock only: another lane may be writing the state
            rec.attempts, rec.started_at, rec.error, rec.notes = rec.attempts + 1, now(), None, []
            if gpus:
                rec.gpus, rec.port = gpus, lane.port
            self.state.current = item.name
        self.lanes[item.name] = lane

        def go() -> None:
            outcome: BaseException | None = None
            try:
                lane.run_item(item, rec)
            except BaseException as e:  # noqa: BLE001 - the runner decides what it means (ended)
                outcome = e
            finished.append((item, rec, outcome))
        self.note_running(list(self.lanes))
        threading.Thread(target=go, daemon=True, name=item.name).start()

    def ended(self, item: Item, rec: ItemState, e: BaseException | None) -> str | None:
        """The one failure path: record how the item ended; why its GPUs are kept out (their memory
        stays held), else None. Anything but ItemFailed / Stopped / Fatal (a runner bug, a full disk)
        is a crash: its server is ended here, the pool stops, main() records why (abort)."""
        lane = self.lanes.pop(item.name, None)
        if isinstance(e, ItemFailed):
            msg = f"{e}; {REBOOT_HINT}" if self.rebooted and rec.status == "preflight" else str(e)
            self.set(rec, "failed", f"failed during {rec.status}", error=msg, finished_at=now())
        elif isinstance(e, Stopped):
            self.set(rec, "pending", "interrupted by SIGTERM; redone on resume", error=str(e))
        elif isinstance(e, Fatal):  # this set's memory stayed held: these GPUs are out, the others go on
            self.set(rec, "failed", "GPU memory not released", error=str(e), finished_at=now())
            return str(e)
        elif e is not None and lane is not None:
            try:
                lane.end()
            except BaseException as e2:  # noqa: BLE001 - the crash is the cause recorded
                log(f"after a runner error the server could not be ended: {e2}")
        return lane.held_why if lane is not None else None

    def note_running(self, names: list[str] | None = None) -> None:
        with self.lock:
            self.state.running = names if names is not None else \
                [i.name for i in self.state.items if i.status in RUNNING_STATUSES]
            self.save()

    # ---------------------------------------------------------------- processes
    def abort(self, e: BaseException) -> None:
        """Whatever ends the runner ends its servers and bench clients too, and says why."""
        for lane in list(self.lanes.values()):
            try:
                lane.end()
            except BaseException as stop_error:  # noqa: BLE001 - record the first cause, still end the rest
                log(f"while aborting: {stop_error}")
        self.end_previous_leftovers()  # by run token: a bench client, an engine
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            why = f"no space left on {os.path.dirname(str(e.filename)) if e.filename else self.run_dir}"
        else:
            why = f"runner crashed: {type(e).__name__}: {e}"
        with suppress(OSError):
            os.unlink(self.reserve)  # frees room on a full disk for the last state
        for rec in self.state.items if self.state else []:  # the item(s) it ran in; a lane the pool stopped is pending
            if rec.status in RUNNING_STATUSES:
                rec.status, rec.phase, rec.error, rec.finished_at = "failed", "queue stopped", why, now()
        try:
            if self.state is not None:
                self.finish("failed", why)
        except OSError as e2:
            log(f"cannot record the state ({e2}): {why}")
        with suppress(OSError):
            print(f"specfleet runner: {why}", file=sys.stderr, flush=True)

    def end_previous_leftovers(self) -> None:
        """After a runner crash or kill: end what an earlier runner of this run dir left."""
        end_pids([pid for pid, _ in live_pids() if proc_has_token(pid, self.token)],
                 "processes an earlier runner left")

    def on_sigterm(self, signum, frame) -> None:
        log(f"signal {signum}: stopping after cleaning up the current server")
        self.stopping = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True, help="run spec JSON written by the bastion")
    args = ap.parse_args(argv)
    try:
        spec = RunSpec.load(args.spec)
    except (OSError, ValueError) as e:   # SpecError names the field; json's error its line
        why = str(e) if isinstance(e, SpecError) else f"{type(e).__name__}: {e}"
        print(f"specfleet runner: bad run spec {args.spec}: {' '.join(why.split())}", file=sys.stderr)
        return EXIT_SPEC
    os.makedirs(spec.work_dir, exist_ok=True)
    lock_path = layout.lock_path(spec.work_dir)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
        print(f"specfleet runner: another runner holds {lock_path} ({holder}); "
              "use `fab stop` or wait for it to finish", file=sys.stderr)
        return EXIT_LOCKED
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid={os.getpid()} run_id={spec.run_id}\n".encode(), 0)
    runner = Runner(spec)
    signal.signal(signal.SIGTERM, runner.on_sigterm)
    signal.signal(signal.SIGINT, runner.on_sigterm)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        return runner.run()
    except Exception as e:  # noqa: BLE001 - a full disk, a bug: never leave a server holding the GPU
        runner.abort(e)
        return EXIT_FATAL
