"""GPU slots: what a configuration needs, which GPUs of a node it gets, several servers at once.

Stdlib only: part of the worker program (runner.pyz); the bastion's split and plan
checks import the same functions, so the GPU count a configuration needs has one definition.

    needed(argv)               GPUs one `vllm serve` argv uses: tensor x pipeline x data parallel size
    pick(free, need, groups)   the GPU set it gets: contiguous indices inside one NVLink group first
    admit(need, pin, free, ...) the admission rule (pinned GPU, else pick), one for the pool and simulate
    simulate(items, gpus, ...) the node's busy time when its queue runs the way run_slots runs it
    run_slots(runner)          the runner's queue over the node's GPUs (several servers at once)

A node's GPUs come from the run spec's `gpus` (the inventory/facts: index, uuid, name); the runner
checks them against nvidia-smi before anything starts. `packing: exclusive` (the plan's default):
one server on the node at a time, on the GPUs it needs; `shared`: as many as fit on disjoint sets.
"""
from __future__ import annotations

import heapq
import itertools
import os
import threading
import time

from .runner_lib import REBOOT_HINT, Fatal, ItemFailed, Stopped, gpu_table
from .runspec import Serve

# flag -> (short form) the parallel sizes whose product is the number of GPUs one server uses
PARALLEL_FLAGS = {"--tensor-parallel-size": "-tp", "--pipeline-parallel-size": "-pp",
                  "--data-parallel-size": "-dp"}
POLL_S = 0.2  # how often the pool looks for a finished server and a free GPU set


def parallel_sizes(argv: list[str]) -> dict[str, int]:
    """{'--tensor-parallel-size': N, ...} as vLLM's argparse reads it (the last one wins); ValueError
    names the flag when its value is not a positive integer."""
    out: dict[str, int] = {}
    for i, w in enumerate(argv):
        for flag, short in PARALLEL_FLAGS.items():
            for name in (flag, short):
                if w == name:
                    val = argv[i + 1] if i + 1 < len(argv) else ""
                elif w.startswith(name + "="):
                    val = w.split("=", 1)[1]
                else:
                    continue
                if not val.isdigit() or int(val) < 1:
                    raise ValueError(f"{flag} {val!r} is not a positive integer")
                out[flag] = int(val)
    return out


def needed(argv: list[str]) -> int:
    """How many GPUs one server with this argv uses (1 when no parallel size is given)."""
    n = 1
    for v in parallel_sizes(argv).values():
        n *= v
    return n


def parse_gpus(value, where: str) -> list[dict]:
    """A node's GPUs: a count N (indices 0..N-1, UUIDs read on the worker) or a list of
    {index?, uuid?, name, memory_mib} (the inventory's `gpus`, indexed in list order; `fab facts`). ValueError names `where`
    (when given: the inventory's own error already names file, host and field)."""
    where = f"{where}: " if where else ""
    if isinstance(value, bool):
        raise ValueError(f"{where}gpus must be a count or a list of GPUs, not {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"{where}gpus must be at least 1, not {value}")
        return [{"index": i} for i in range(value)]
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}gpus must be a count or a non-empty list of {{index, uuid, name}}")
    out, seen = [], set()
    for pos, g in enumerate(value):
        if isinstance(g, dict) and "index" not in g:  # the inventory's list: indexed in list order
            g = {"index": pos, **g}
        if not isinstance(g, dict) or isinstance(g.get("index"), bool) or not isinstance(g.get("index"), int) \
                or g["index"] < 0:
            raise ValueError(f"{where}each GPU needs an integer index >= 0, not {g!r}")
        bad = set(g) - {"index", "uuid", "name", "memory_mib"}
        if bad:
            raise ValueError(f"{where}GPU {g['index']}: unknown key(s) {', '.join(sorted(bad))}")
        for k in ("uuid", "name"):
            if k in g and (not isinstance(g[k], str) or not g[k].strip() or any(c in g[k] for c in ",\n\0")):
                raise ValueError(f"{where}GPU {g['index']}: {k} must be one line without commas, not {g[k]!r}")
        if g["index"] in seen:
            raise ValueError(f"{where}GPU index {g['index']} is listed twice")
        seen.add(g["index"])
        out.append(dict(g))
    return sorted(out, key=lambda g: g["index"])


def parse_groups(value, indices: list[int], where: str) -> list[list[int]] | None:
    """The inventory's `gpu_groups`: lists of GPU indices joined by NVLink/NVSwitch; a server with
    several GPUs gets them inside one group. None: no topology known, any set will do."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(g, list) and g for g in value):
        raise ValueError(f"{where}: gpu_groups must be a list of lists of GPU indices")
    flat = [i for g in value for i in g]
    if any(isinstance(i, bool) or not isinstance(i, int) for i in flat) or len(set(flat)) != len(flat):
        raise ValueError(f"{where}: gpu_groups must list each GPU index once")
    unknown = sorted(set(flat) - set(indices))
    if unknown:
        raise ValueError(f"{where}: gpu_groups names GPU(s) {unknown} that gpus does not list")
    return [sorted(g) for g in value]


def pick(free: list[int], need: int, groups: list[list[int]] | None = None) -> list[int] | None:
    """The GPU set a server needing `need` GPUs gets from `free` (indices), or None when none fits.

    Inside one group (no groups: all GPUs are one group); the lowest run of consecutive indices first
    (on HGX boards neighbours share a PCIe switch), else the lowest free ones of the group that fits
    tightest (the big free groups stay for the wide servers)."""
    if need == 1 and not groups:   # the common case, and the split's hot path
        return [min(free)] if free else None
    free_set = set(free)
    cands = []
    for g in groups or [sorted(free_set)]:
        avail = [i for i in g if i in free_set]
        if len(avail) < need:
            continue
        for j in range(len(avail) - need + 1):
            run = avail[j:j + need]
            if run[-1] - run[0] == need - 1:
                cands.append((0, len(avail), run))
                break
        else:
            cands.append((1, len(avail), avail[:need]))
    return min(cands)[2] if cands else None


def fits_ever(need: int, gpus: list[int], groups: list[list[int]] | None) -> bool:
    return pick(gpus, need, groups) is not None


def admit(need: int, pin: int | None, free, groups, picker=pick) -> list[int] | None:
    """The admission rule, for the pool (Pool.run) and the split's simulation (simulate) alike: in
    queue order, an item starts on its pinned GPU when that is free, else on the set `picker` (pick)
    gives it from the free GPUs; None: it waits. (Exclusive packing: nothing starts beside a running one.)"""
    if pin is not None:
        return [pin] if pin in free else None
    return picker(free, need, groups) if need <= len(free) else None


def simulate(items: list[tuple], gpus: list[int], groups: list[list[int]] | None = None,
             packing: str = "shared", checked: bool = False) -> tuple[float, dict[str, tuple[float, list[int]]]]:
    """(busy time, {name: (start, gpu set)}) of a node running `items` ((name, need, seconds), queue
    order; a 4th element, when not None, is the one GPU index it is pinned to: item["gpu_pin"]) as
    run_slots does: at each moment every pending item that fits starts, in queue order; exclusive = one
    at a time. A `need` larger than the node (or any group) raises ValueError;
    checked=True: the caller has checked that already (the split simulates the same items thousands
    of times)."""
    if not checked:
        for it in items:
            name, need, pin = it[0], it[1], it[3] if len(it) > 3 else None
            if pin is not None and pin not in gpus:
                raise ValueError(f"{name} is pinned to GPU {pin}; the node has {sorted(gpus)}")
            if not fits_ever(need, gpus, groups):
                raise ValueError(f"{name} needs {need} GPU(s) in one group; the node has {len(gpus)}"
                                 + (f" in groups {groups}" if groups else ""))
    gkey = tuple(map(tuple, groups)) if groups else None
    t, running, starts = 0.0, [], {}   # running: a heap of (end, name, gpu set)
    pending, free = list(items), tuple(sorted(gpus))
    exclusive = packing == "exclusive"
    while pending or running:
        waiting = []
        for k, it in enumerate(pending):
            if exclusive and running or not free:
                waiting.extend(pending[k:])
                break
            got = admit(it[1], it[3] if len(it) > 3 else None, free, gkey, _pick_cached)
            if got is None:
                waiting.append(it)
                continue
            heapq.heappush(running, (t + it[2], it[0], got))
            starts[it[0]] = (t, got)
            free = tuple(i for i in free if i not in got)
        pending = waiting
        t = running[0][0]
        back = []
        while running and running[0][0] <= t + 1e-9:
            back.extend(heapq.heappop(running)[2])
        free = tuple(sorted(free + tuple(back)))
    return t, starts


_PICKS: dict = {}


def _pick_cached(free: tuple, need: int, groups: tuple | None) -> list[int] | None:
    """pick() for simulate's hot loop: a node has few GPUs, so few (free set, need) pairs recur."""
    key = (free, need, groups)
    if key not in _PICKS:
        if len(_PICKS) > 100_000:
            _PICKS.clear()
        got = pick(list(free), need, [list(g) for g in groups] if groups else None)
        _PICKS[key] = None if got is None else tuple(got)
    got = _PICKS[key]
    return None if got is None else list(got)


def server_tag(run_dir: str, name: str) -> str:
    """The SPECFLEET_SERVER value of one server: its run dir and item name. The name alone is not
    enough: another runner that can see this node's processes (the testbed's workers share one PID
    namespace; another campaign on the node) runs a `vanilla` too, and a leftover search by the bare
    name ended the neighbour's EngineCore (its streams ended without [DONE])."""
    return f"{run_dir}/{name}"


# ------------------------------------------------------------------------------------------ runner side
def check_gpus(want: list[dict], seen: list[dict]) -> list[dict]:
    """The spec's GPUs completed from nvidia-smi's (index, uuid, name); ValueError when they disagree
    (an inventory written for another node, a GPU that fell off the bus)."""
    by_index = {g["index"]: g for g in seen}
    out = []
    for g in want:
        s = by_index.get(g["index"])
        if s is None:
            raise ValueError(f"GPU {g['index']} is not listed by nvidia-smi (it lists {sorted(by_index)})")
        if g.get("uuid") and g["uuid"] != s["uuid"]:
            raise ValueError(f"GPU {g['index']}: nvidia-smi says UUID {s['uuid']}, the inventory {g['uuid']}")
        out.append({"index": g["index"], "uuid": s["uuid"], "name": s.get("name") or g.get("name") or "?"})
    return out


def lane_class(base):
    """A Runner subclass for one server on one GPU set, sharing the queue's state with `parent`."""

    class Lane(base):
        stopping = property(lambda self: self.parent.stopping)

        def save(self) -> None:
            with self.parent.lock:
                base.save(self)

        def gpu_used_mib(self) -> int:
            return self.parent.set_used_mib(self.gpus)

        def bench_metadata(self, item: dict) -> list[list[str]]:  # which GPUs measured this result
            return [["gpu_uuids", ",".join(g["uuid"] for g in self.gpus)],
                    ["gpu_names", ",".join(g["name"] for g in self.gpus)], ["packing", self.parent.packing],
                    *base.bench_metadata(self, item)]

        def preflight(self, item: dict) -> None:
            used = self.wait_gpu_free(min(30.0, self.spec["stop_timeout_s"]))
            if used >= self.spec["gpu_memory_free_mib"]:  # a foreign holder: keep this set out, not item by item
                self.held_why = (f"memory used {used} MiB >= {self.spec['gpu_memory_free_mib']} MiB before start "
                                 "(another process holds it)")
                raise ItemFailed(f"GPU memory used {used} MiB on {self.where()} before start: "
                                             "another process holds it; these GPUs are kept out of this run")
            self.vllm_version = self.vllm_version or self.parent.vllm_version
            base.preflight(self, item)
            self.parent.vllm_version = self.vllm_version
            self.env["CUDA_VISIBLE_DEVICES"] = ",".join(g["uuid"] for g in self.gpus)
            self.env["SPECFLEET_SERVER"] = server_tag(self.run_dir, item["name"])

        def where(self) -> str:
            return "GPU " + ",".join(f"{g['index']} ({g['uuid']})" for g in self.gpus)

        def fit_prompts(self, item: dict, rec: dict) -> dict:
            with self.parent.fit_lock:  # one check per distinct setup, never two writing one file
                return base.fit_prompts(self, item, rec)

    return Lane


class Pool:
    """The runner's queue over the node's GPUs: each item starts on a free GPU set in its own thread
    (a Lane: the runner's item lifecycle with its own server, port, CUDA_VISIBLE_DEVICES and memory
    gate); a failure ends that item alone; a GPU set whose memory stays held is kept out."""

    def __init__(self, runner, gpus: list[dict], groups, packing: str):
        self.r, self.gpus, self.groups, self.packing = runner, gpus, groups, packing
        self.by_index = {g["index"]: g for g in gpus}
        self.lock, self.fit_lock = threading.RLock(), threading.Lock()
        self.held: dict[int, str] = {}  # GPU index -> why it is kept out
        self.Lane = lane_class(type(runner))

    @property
    def stopping(self) -> bool:
        return self.r.stopping

    @property
    def vllm_version(self):
        return self.r.vllm_version

    @vllm_version.setter
    def vllm_version(self, v):
        self.r.vllm_version = v

    @property
    def spec(self) -> dict:
        return self.r.spec

    def set_used_mib(self, gpus: list[dict]) -> int:
        for attempt in range(3):  # one nvidia-smi for the whole node, asked by every server's gate
            try:
                table = gpu_table(env_without_devices(self.r.env))
                break
            except ItemFailed:
                if attempt == 2:
                    raise
                time.sleep(1.0)
        uuids = {g["uuid"] for g in gpus}
        got = [t["used"] for t in table if t["uuid"] in uuids]
        if len(got) != len(uuids):
            raise ItemFailed(f"GPU(s) {', '.join(sorted(uuids - {t['uuid'] for t in table}))} not listed "
                                  "by nvidia-smi")
        return max(got)

    def lane(self, gpus: list[dict]):
        lane = object.__new__(self.Lane)
        lane.__dict__.update({k: v for k, v in self.r.__dict__.items() if k not in ("stopping", "save")})
        lane.parent, lane.gpus, lane.held_why = self, gpus, None
        lane.spec = dict(self.r.spec, port=int(self.r.spec["port"]) + gpus[0]["index"])
        lane.server = lane.bench = lane.env = lane.model = None
        return lane

    def go(self, lane, item: dict, rec: dict, done: list) -> None:
        # stop_server ends leftover VLLM:: processes carrying this token: this server's, not a neighbour's
        lane.token = f"SPECFLEET_SERVER={server_tag(lane.run_dir, item['name'])}".encode()
        why = None
        try:
            lane.run_item(item, rec)
        except ItemFailed as e:
            msg = f"{e}; {REBOOT_HINT}" if self.r.rebooted and rec["status"] == "preflight" else str(e)
            lane.set(rec, "failed", f"failed during {rec['status']}", error=msg, finished_at=now())
        except Stopped as e:
            lane.set(rec, "pending", "interrupted by SIGTERM; redone on resume", error=str(e))
        except Fatal as e:  # this set's memory stayed held: these GPUs are out, the others go on
            why = str(e)
            lane.set(rec, "failed", "GPU memory not released", error=why, finished_at=now())
        except BaseException as e:  # noqa: BLE001 - a runner bug in one lane ends that item, not the node
            lane.set(rec, "failed", f"failed during {rec['status']}",
                     error=f"runner error: {type(e).__name__}: {e}", finished_at=now())
            try:
                lane.stop_server()
            except BaseException as e2:  # noqa: BLE001
                why = f"after a runner error the server's GPUs could not be checked: {e2}"
        finally:
            done.append((lane, item, rec, why or lane.held_why))

    def run(self, todo: list[tuple[dict, dict]]) -> int:
        """Run `todo` ((item, rec) in queue order); the runner's exit code."""
        r = self.r
        pending, running, done = list(todo), {}, []   # running: item name -> (thread, GPU indices)
        failed = False
        indices = [g["index"] for g in self.gpus]
        while True:
            if not pending and not running:  # every slot idle, the queue empty: the next round, if any
                more = [] if self.stopping else self.next_round()
                if not more:
                    break
                pending += more
                todo = list(todo) + more
            for lane, item, rec, why in list(done):
                done.remove((lane, item, rec, why))
                _, used = running.pop(item["name"])
                failed = failed or rec["status"] == "failed"
                if why:
                    for i in used:
                        self.held[i] = why
                self.note_running()
            if not self.stopping:
                busy = {i for _, s in running.values() for i in s} | set(self.held)
                for item, rec in list(pending):
                    if self.packing == "exclusive" and running:
                        break
                    need = max(needed(Serve.from_json(item["serve"]).options()), len(indices) if item.get("whole_node") else 1)
                    ok = [i for i in indices if i not in self.held]
                    pin = item.get("gpu_pin")   # equivalence.every_gpu: the baseline's run on this GPU
                    why = None
                    if pin is not None and pin not in ok:
                        why = f"pinned to GPU {pin}, which is " + (
                            f"kept out: {self.held[pin]}" if pin in self.held else f"not one of the node's GPUs {indices}")
                    elif pin is None and not fits_ever(need, ok, self.groups):
                        held = "; ".join(f"GPU {i}: {w}" for i, w in sorted(self.held.items()))
                        why = (f"needs {need} GPU(s) in one group; the node has {len(indices)}"
                               + (f", kept out: {held}" if held else "")
                               + (f" (gpu_groups {self.groups})" if self.groups else ""))
                    if why:
                        pending.remove((item, rec))
                        failed = True
                        rec.update(attempts=rec["attempts"] + 1, started_at=now())
                        r.set(rec, "failed", "no GPU set", finished_at=now(), error=why)
                        continue
                    got = admit(need, pin, [i for i in indices if i not in busy], self.groups)
                    if got is None:
                        continue
                    pending.remove((item, rec))
                    sset = [self.by_index[i] for i in got]
                    lane = self.lane(sset[:needed(Serve.from_json(item["serve"]).options())])
                    rec.update(attempts=rec["attempts"] + 1, started_at=now(), error=None, notes=[],
                               gpus=lane.gpus, port=lane.spec["port"])
                    t = threading.Thread(target=self.go, args=(lane, item, rec, done), daemon=True,
                                         name=item["name"])
                    running[item["name"]] = (t, got)
                    busy |= set(got)
                    with self.lock:
                        r.state["current"] = item["name"]
                    self.note_running(list(running))
                    t.start()
            elif not running:
                break
            time.sleep(POLL_S)
        if self.stopping and (pending or any(rec["status"] == "pending" for _, rec in todo)):
            r.finish("stopped", "stopped by SIGTERM")
            return 143
        held = "; ".join(f"GPU {i}: {w}" for i, w in sorted(self.held.items()))
        if held:
            r.finish("failed", f"GPU memory not released, these GPUs were kept out: {held}")
            return 4
        r.finish("failed" if failed else "done", "some items failed (see items[].error)" if failed else None)
        return 1 if failed else 0

    def next_round(self) -> list[tuple[dict, dict]]:
        """The crossover search's next round (Runner.queue() past the spec's items): it reads what
        every finished server measured, so the pool asks only when no server runs. [] when none."""
        return []

    def note_running(self, names: list[str] | None = None) -> None:
        with self.lock:
            self.r.state["running"] = names if names is not None else \
                [i["name"] for i in self.r.state["items"] if i["status"] in RUNNING_STATUSES]
            self.r.save()


RUNNING_STATUSES = ("preflight", "loading", "benchmarking", "stopping")


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def run_slots(runner) -> int:
    """The runner's queue over the spec's GPUs (runner.run calls this when the spec lists `gpus`)."""
    s = runner.spec
    try:
        gpus = check_gpus(s["gpus"], gpu_table(env_without_devices(runner.env)))
    except (ValueError, ItemFailed) as e:
        runner.finish("failed", f"the node's GPUs: {e}")
        return 2
    runner.state["gpus"] = gpus
    runner.state["packing"] = s.get("packing", "exclusive")
    # Runner.queue(): the spec's items, then (when the plan has a crossover search) each refinement
    # round's, appended to the spec; asked past the items only once every slot is idle
    queue, taken = runner.queue(), len(s["items"])
    todo = [(it, rec) for it, rec in itertools.islice(queue, taken) if rec["status"] != "done"]
    pool = Pool(runner, gpus, s.get("gpu_groups"), s.get("packing", "exclusive"))

    def next_round() -> list[tuple[dict, dict]]:
        nonlocal taken
        first = next(queue, None)  # runs the round: its items are appended to the spec at once
        if first is None:
            return []
        out = [first, *itertools.islice(queue, len(s["items"]) - taken - 1)]
        taken = len(s["items"])
        return [(it, rec) for it, rec in out if rec["status"] != "done"] or next_round()
    pool.next_round = next_round
    runner.save = _locked(runner.save, pool.lock)
    return pool.run(todo)


def _locked(fn, lock):
    def inner(*a, **kw):
        with lock:
            return fn(*a, **kw)
    return inner


def env_without_devices(env: dict) -> dict:
    """nvidia-smi ignores CUDA_VISIBLE_DEVICES, a stand-in might not: the table lists every GPU."""
    return {k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"} if env else dict(os.environ)
