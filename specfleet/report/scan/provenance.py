"""Where each result comes from: the node's `provenance.json` (written by `fab collect`), each run's
record (worker/record.RunRecord: the engine, the serve argv as a list; results without one: the
legacy converter, resultfile/legacy.py), the result files' metadata and the server log, as two
report tables.

The worker half is one host fact (specfleet.facts.worker_provenance.WorkerProvenance, run by
specfleet.collect.fetch): GPUs, driver, CUDA, the venv's package versions, sha256 of the model's
config.json and weight index and of the dataset. The local half (`node_table`, `result_table`) reads what is on disk
and leaves a value out ("not recorded") rather than guess it.

Simulated inputs are detected from several independent signals (`simulated_signals`): the
result's `simulated` key, its engine / engine_version / vllm_version naming the simulator, the
venv manifest and packages, the model config's `simulated` flag, the server log's banner.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from ...resultfile.legacy import engine_identity
from ...untrusted_json import loads_or_none
from ...worker import layout

if TYPE_CHECKING:
    import pandas as pd

    from .folder import CollectedFolder

NOT_RECORDED = "not recorded"
SIM_WORDS = re.compile(r"simvllm|simulated", re.I)
SERVE_LINE = re.compile(r"^==== specfleet \S+ run \S+: (.*)$", re.M)
ENGINE_SPEC = re.compile(r"speculative_config=(SpeculativeConfig\([^)]*\)|None)")
SERVER_SAMPLING = re.compile(r"default (?:chat |completion )?sampling params from model: (\{[^}]*\})", re.I)


# ------------------------------------------------------------------ local reading
def read_provenance(hdir: Path) -> dict:
    data = loads_or_none((hdir / layout.PROVENANCE).read_text(encoding="utf-8", errors="replace")) \
        if (hdir / layout.PROVENANCE).is_file() else None
    return data if isinstance(data, dict) else {}


def given_bandwidths(camp: "CollectedFolder") -> dict[str, float]:
    """node -> the GPU memory bandwidth (GB/s) its inventory gave, as `fab collect` saved it in the node's
    provenance.json (layout.GIVEN_BANDWIDTH): `fab report` later uses what collect used, per node."""
    out = {}
    for host in sorted(camp.nodes):
        v = read_provenance(camp.root / host).get(layout.GIVEN_BANDWIDTH)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            out[host] = float(v)
    return out


def argv_facts(argv: list[str]) -> dict[str, str]:
    """The server's command line (shell-quoted) and its --speculative-config, from a run record's argv."""
    out = {"server_argv": shlex.join(argv)}
    if "--speculative-config" in argv[:-1]:
        out["speculative_config"] = argv[argv.index("--speculative-config") + 1]
    return out


def server_facts(log: Path) -> dict[str, str]:
    """From the last server start in a runner-written log: the speculative config as the engine
    logged it, the server's own sampling defaults; and, for runs without a record (legacy), the argv
    as the log's header line wrote it, read by word (a word holding a space is misread there)."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    starts = list(SERVE_LINE.finditer(text))
    if starts:
        text = text[starts[-1].start():]
    out: dict[str, str] = {}
    if starts:
        out["server_argv"] = starts[-1].group(1).strip()
        toks = out["server_argv"].split()
        if "--speculative-config" in toks[:-1]:
            out["speculative_config"] = toks[toks.index("--speculative-config") + 1]
    if m := ENGINE_SPEC.search(text):
        out["engine_speculative_config"] = m.group(1)
    if m := SERVER_SAMPLING.search(text):
        out["server_sampling_defaults"] = m.group(1)
    return out


def engine_of(run) -> dict | None:
    """The engine the worker observed for this run (its record: name, version, simulated), or None
    for a run without it (a plain vLLM file, an older runner)."""
    return engine_identity_of(run.record.engine) if run.record else None


def engine_identity_of(ident) -> dict | None:
    return ident if isinstance(ident, dict) and "simulated" in ident and ident.get("version") else None


def _sim_result(run) -> list[str]:
    res, ident = run.result, engine_of(run)
    if ident is not None:  # the worker's observation is the answer; nothing is guessed
        return [f"the worker observed {ident.get('name')} {ident.get('version')!r} (simulated)"] \
            if ident["simulated"] is True else []
    ex = res.extra
    sig = []
    if res.simulated:
        sig.append('"simulated": true')
    for k in ("engine", "engine_version", "vllm_version"):
        v = ex.get(k)
        if isinstance(v, str) and SIM_WORDS.search(v):
            sig.append(f"{k} {v!r}")
    return sig


def simulated_signals(camp: "CollectedFolder") -> list[str]:
    """Why these inputs count as simulated ([] = no sign of the simulator). Results that carry the
    engine the worker observed (engine_of) are judged by it alone; the signs below are read only for
    a host whose results lack it (plain vLLM files, a campaign of an older runner)."""
    found = [f"{r.host}: {r.path.name} {s}" for r in camp.runs for s in _sim_result(r)]
    observed = {r.host for r in camp.runs if engine_of(r) is not None}
    for host in [h for h in camp.nodes if h not in observed]:
        p = read_provenance(camp.root / host)
        if p.get("venv_simulated"):
            found.append(f"{host}: venv manifest says simulated")
        if any("simvllm" in str(k) for k in {**(p.get("venv") or {}), **(p.get("dists") or {})}):
            found.append(f"{host}: the venv holds specfleet-simvllm")
        if p.get("model_simulated"):
            found.append(f"{host}: the model's config.json has the simulated flag")
        for log in sorted((camp.root / host).glob("*" + layout.SERVER_LOG_SUFFIX)):
            try:
                head = log.read_text(encoding="utf-8", errors="replace")[:20000]
            except OSError:
                continue
            if "specfleet-simvllm" in head or "SIMULATED" in head:
                found.append(f"{host}: {log.name} is a simulated server's log")
                break
    return list(dict.fromkeys(found))  # each sign once


def engine_name(res_meta: dict, prov: dict, simulated: bool, seen: dict | None = None) -> str:
    """'simvllm 1.0 (simulated vLLM)' for the simulator (never a bare vLLM version), else 'vLLM X'.
    `seen`: the engine a run record holds (the worker's observation wins; the rest: runs without it)."""
    seen = engine_identity_of(seen) or engine_identity(res_meta.get("engine_identity"))
    if seen:
        name = str(seen["version"]) if seen.get("simulated") is True else f"vLLM {seen['version']}"
        return f"{name}, {res_meta['engine']}" if res_meta.get("engine") and not seen.get("simulated") else name
    ev = res_meta.get("engine_version") or ""
    if simulated:
        if ev and SIM_WORDS.search(ev):
            return ev
        v = (prov.get("dists") or {}).get("specfleet-simvllm")
        return f"simvllm {v} (simulated vLLM)" if v else "simvllm (simulated vLLM), version not recorded"
    v = res_meta.get("vllm_version") or (prov.get("dists") or {}).get("vllm") or \
        (prov.get("venv") or {}).get("vllm")
    name = f"vLLM {v}" if v else f"vLLM, version {NOT_RECORDED}"
    return f"{name}, {res_meta['engine']}" if res_meta.get("engine") else name  # e.g. "vllm-cuda (real GPU)"


def node_table(camp: "CollectedFolder") -> pd.DataFrame:
    sim_hosts = {s.split(":", 1)[0] for s in simulated_signals(camp)}
    rows = []
    for host in sorted(camp.nodes):
        n = camp.nodes[host]
        p, meta = read_provenance(camp.root / host), n.provenance
        dists = p.get("dists") or {}
        dates = sorted(n.run_dates)
        rows.append({
            "node": host, "engine": engine_name(meta, p, host in sim_hosts,
                                                next((e for r in camp.runs if r.host == host and (e := engine_of(r))),
                                                     None)),
            "vllm": " | ".join(dict.fromkeys(v for v in [*(str(r.result.extra.get("vllm_version") or "") for r in
                                                             camp.runs if r.host == host),
                                                           dists.get("vllm") or (p.get("venv") or {}).get("vllm") or ""]
                                             if v)) or meta.get("vllm_version") or "",
            "torch": meta.get("torch_version") or dists.get("torch") or NOT_RECORDED,
            "gpu": meta.get("gpu") or p.get("gpu_name") or p.get("gpu") or NOT_RECORDED,
            "gpus": p.get("gpu_count") if p.get("gpus") is not None else NOT_RECORDED,
            "driver": meta.get("driver") or meta.get("driver_version") or p.get("driver") or NOT_RECORDED,
            "cuda": meta.get("cuda_version") or p.get("cuda") or NOT_RECORDED,
            "python": p.get("python") or NOT_RECORDED,
            "venv_digest": p.get("venv_digest") or NOT_RECORDED,
            "plan_hash": meta.get("plan_hash", ""),
            "first_run": dates[0] if dates else meta.get("started_at", ""),
            "last_run": dates[-1] if dates else meta.get("finished_at", ""),
            "runs": sum(1 for r in camp.runs if r.host == host)})
    import pandas as pd  # here: the report alone needs it, and pandas takes ~1 s to import
    return pd.DataFrame(rows, columns=[c for c, *_ in NODE_COLS])


def plan_hashes(camp: "CollectedFolder") -> dict[str, list[str]]:
    """plan hash -> the 'node/config' items that carry it (results without one are left out)."""
    out: dict[str, list[str]] = {}
    for r in camp.runs:
        h = r.record.plan_hash if r.record else r.result.extra.get("plan_hash")
        if h:
            key = f"{r.host}/{r.config}"
            if key not in out.setdefault(str(h), []):
                out[str(h)].append(key)
    return out


NODE_COLS = [(c, c.replace("_", " "), 0 if c == "runs" else -1, "") for c in
             ("node", "engine", "vllm", "torch", "gpu", "gpus", "driver", "cuda", "python", "venv_digest",
              "plan_hash", "first_run", "last_run", "runs")]
RESULT_COLS = [(c, c.replace("_", " "), -1, "") for c in
               ("node", "config", "plan_hash", "model", "model_config_sha256", "weight_index_sha256",
                "dataset_sha256", "prompts", "gpus", "gpu_model", "driver", "cuda", "torch", "vllm", "decoding",
                "chat_template",
                "sampling", "server_sampling_defaults", "speculative_config",
                "engine_speculative_config", "server_argv")]


def provenance_sections(nodes: pd.DataFrame, results: pd.DataFrame | None) -> list[tuple[str, pd.DataFrame, list, str]]:
    out = [("Provenance", nodes, NODE_COLS,
            f"Per node: from the result files' metadata, {layout.PROVENANCE} (fab collect's probe: nvidia-smi, "
            f"the venv's packages) and {layout.STATE}. 'not recorded' = no source had it.")]
    if results is not None and not results.empty:
        out.append(("Provenance per result", results, RESULT_COLS,
                    "Per node and configuration: plan hash of the result files, model path with the sha256 "
                    "(first 12 hex digits) of its config.json and weight index, dataset sha256, the prompts "
                    "each run sent (and those dropped as too long for the context), the GPU(s) it ran on "
                    "(UUID and name, from the result metadata), GPU model, driver, CUDA, torch and vLLM as every source "
                    f"recorded them (result metadata, {layout.PROVENANCE}, server log; 'a | b (MIXED)' when they differ), "
                    "decoding (greedy / sampled, the runner's `decoding`), where the prompts were chat-templated "
                    "(client + server, server only or client only: the run record, else the result's vLLM release "
                    "and backend read from that release's wheel; vLLM 0.34 stopped the bench client's template for "
                    "chat backends), sampling "
                    "parameters (result metadata, else the run spec's bench command), the server's own "
                    "sampling defaults (server log), the speculative config on the command line and as the "
                    "engine logged it, and the exact server command line (server log)."))
    return out
