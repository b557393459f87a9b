"""A campaign's files: where each lives and what it is called, on the worker and in results/.

Stdlib only: this module travels to the workers in the worker program (runner.pyz) and is
imported by both sides, so the bastion reads what the runner writes
by the same names. tests/unit/test_layout.py keeps every other module from spelling them.

    <work_dir>/.specfleet-runner.lock                 one runner per host (flock; "pid=N run_id=R")
    <work_dir>/<campaign>/<host>/                     the run folder (run_dir)
        run.json                                      the queue `fab bench` placed (RUN_SPEC)
        state.json                                    the runner's state, written atomically (STATE)
        runner.log                                    the runner's own log (RUNNER_LOG)
        <config>.done                                 done marker: item_hash, results (done_marker)
        <config>.server.log                           `vllm serve` output (server_log)
        <config>_conc<N>[_r<K>].json                  one bench result (result_filename)
        <config>_conc<N>[_r<K>].record.json           what the run was (record_file; record.RunRecord)
        <config>_conc<N>[_r<K>].bench.log             `vllm bench serve` output (bench_log)
        <config>_conc<N>[_r<K>].telemetry.jsonl       GPU and /metrics samples of the run (telemetry_file)
        <config>_<cell>.acceptance.json               per-request acceptance, untimed pass (acceptance_file)
        <item>.acceptance.log                         that pass's output (acceptance_log; not collected)
        prompts-fit-<digest>.jsonl                    the prompts that fit (prompts_fit)
        .disk-reserve                                 room to record a full disk (DISK_RESERVE)
    results/<campaign>/<host>/                        the same names, as `fab collect` fetched them
        provenance.json                               what collect probed on the host (PROVENANCE)

The lock sits above the campaigns: one runner per host whatever the campaign (a GPU is one).
"""
from __future__ import annotations

import posixpath
import re

RUNNER_ARTEFACT = "runner.pyz"  # the worker program, one zipapp under the specfleet home (configs role)
RUN_SPEC = "run.json"
STATE = "state.json"
RUNNER_LOG = "runner.log"
PROVENANCE = "provenance.json"
# provenance.json's key for the host's inventory gpu_memory_bandwidth_gbps: collect saves it per host,
# `fab report` reads it back, so the report after collect and a later `fab report` use the same figure
GIVEN_BANDWIDTH = "inventory_gpu_memory_bandwidth_gbps"
DISK_RESERVE = ".disk-reserve"
LOCK = ".specfleet-runner.lock"
# created once per boot by the runner (host.boot_identity); /tmp is emptied at boot
BOOT_MARKER = "/tmp/.specfleet-boot-{uid}"
VENV_MANIFEST = "specfleet-manifest.json"  # what the bastion's venv builder wrote into the venv

DONE_SUFFIX = ".done"
SERVER_LOG_SUFFIX = ".server.log"
BENCH_LOG_SUFFIX = ".bench.log"
TELEMETRY_SUFFIX = ".telemetry.jsonl"
RECORD_SUFFIX = ".record.json"
ACCEPTANCE_SUFFIX = ".acceptance.json"
PARTIAL_SUFFIX = ".partial"  # a result being written; renamed to its final name once it counts

# What the printed plan shows where the runner renders what it found on the worker (runspec.py):
MODEL = "@MODEL@"                # the first model candidate that holds a config.json
VLLM_VERSION = "@VLLM_VERSION@"  # the engine version the runner read in preflight

# <config>_<cell>[_r<K>].json; a bench cell (sweep.py) is conc<N>[-out<L>][-cat_<C>][-n<P>][-rate<R>] (arrivals.py)
CELL_PART = r"conc(?P<conc>\d+)(?:-out(?P<out>\d+))?(?:-cat_(?P<cat>[A-Za-z][A-Za-z0-9_]*?))?(?:-n(?P<n>\d+))?(?:-rate(?P<rate>\d+(?:\.\d+)?))?"
RESULT_RE = re.compile(rf"^(?P<config>.+?)_(?P<cell>{CELL_PART})(?:_r(?P<rep>\d+))?\.json\Z")


def run_dir(root: str, campaign: str, host: str) -> str:
    """A host's run folder under the worker's work_dir (or the bastion's results folder)."""
    return posixpath.join(root, campaign, host)


def lock_path(work_dir: str) -> str:
    return posixpath.join(work_dir, LOCK)


def boot_marker(uid: int | str) -> str:
    return BOOT_MARKER.format(uid=uid)


def done_marker(config: str) -> str:
    return config + DONE_SUFFIX


def server_log(config: str) -> str:
    return config + SERVER_LOG_SUFFIX


def repeat_suffix(rep: int, repeat: int) -> str:
    """`_r<rep>` where a cell has more than one run (rep > repeat: a gate run added later)."""
    return f"_r{rep}" if repeat > 1 or rep > 1 else ""


def result_filename(config: str, concurrency: int, rep: int = 1, repeat: int = 1) -> str:
    suffix = repeat_suffix(rep, repeat)
    return f"{config}_conc{concurrency}{suffix}.json"


def cell_result_filename(config: str, cell, rep: int = 1, repeat: int = 1) -> str:
    """A bench cell's result file (sweep.Cell): a plain cell conc<N> is result_filename's name,
    a swept one `<config>_<cell name>[_r<K>].json` (conc16-out1024-cat_rag)."""
    if cell.name in ("", f"conc{cell.concurrency}"):
        return result_filename(config, cell.concurrency, rep, repeat)
    return f"{config}_{cell.name}{repeat_suffix(rep, repeat)}.json"


def result_glob(config: str) -> str:
    """Every result file of `config` (an rsync/fnmatch pattern)."""
    return f"{config}_conc*.json"


def bench_log(result_file: str) -> str:
    return result_file.removesuffix(".json") + BENCH_LOG_SUFFIX


def record_file(result_file: str) -> str:
    """The run record beside a result (record.RunRecord): what the run was, as the worker knew it."""
    return result_file.removesuffix(".json") + RECORD_SUFFIX


def telemetry_file(result_file: str) -> str:
    """GPU and /metrics samples of one bench run, beside its result (telemetry.py)."""
    return result_file.removesuffix(".json") + TELEMETRY_SUFFIX


def acceptance_file(config: str, cell: str) -> str:
    """A bench cell's per-request acceptance (acceptance.py): one per cell, whatever its repeats (the
    untimed pass sends the cell's prompts once); result_glob(config) matches it, so collect fetches it."""
    return f"{config}_{cell}{ACCEPTANCE_SUFFIX}"


def acceptance_log(item: str) -> str:
    return item + ".acceptance.log"


def prompts_fit(digest: str) -> str:
    return f"prompts-fit-{digest}.jsonl"

