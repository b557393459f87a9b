"""Provenance that acts (issue 23): what produced each run, compared across nodes and within a node.

Per run, from the result's metadata (the runner's `--metadata`: vllm_version, torch_version, gpu or
gpu_names, driver, cuda_version, decoding / sampling_params), the node's provenance.json (fab collect's
probe: gpu_name, driver, cuda, the venv's dists) and the server log's version line. Two runs that
differ in GPU model, driver, CUDA, torch, vLLM version, decoding (greedy / sampled) or prompt template
(client + server vs server only: vLLM 0.34 stopped the bench client's template for chat backends) are not one
campaign: the gate refuses the merge as for mixed plans (exit 8; --force merges and stamps every
output MIXED PROVENANCE). The plan's `vllm_version` pin is compared with every version a real node
recorded (the simulated engine has no vLLM version: not checked there, said so).
"""
from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import pandas as pd

from ...plan.releases import release_of
from ...untrusted_json import loads
from ...worker import layout
from ...worker.fitcheck import applied_template
from .gpu_gate import where
from ..scan.provenance import NOT_RECORDED, RESULT_COLS, argv_facts, read_provenance, server_facts, simulated_signals

if TYPE_CHECKING:
    from ..scan.folder import CollectedFolder, Run

# "cuda" is torch's CUDA build (the runner's cuda_version), "driver_cuda" the highest CUDA the driver
# supports (nvidia-smi, provenance.json): they differ legitimately (a cu128 torch on a 13.0 driver),
# so each is compared only with itself
FIELDS = {"gpu": "GPU model", "driver": "driver", "cuda": "CUDA (torch build)", "driver_cuda": "CUDA (driver)",
          "torch": "torch", "vllm": "vLLM version", "decoding": "decoding", "chat_template": "prompt template"}
# where the prompts were chat-templated (fitcheck.applied_template), as the report words it
TEMPLATE_WORDS = {"client+server": "client + server (double)", "server": "server only (single)",
                  "client": "client only (single)"}


def template_of(run: "Run") -> tuple[str, str] | None:
    """(where the prompts were chat-templated, its source) for one run: the run record's, else, for a
    result written before records carried it, the release the result names and its backend, from that
    release's wheel (releases.py); None when neither tells."""
    if run.record and run.record.chat_template:
        return run.record.chat_template, "run record"
    rel, backend = release_of(str(run.result.extra.get("vllm_version") or "")), run.result.backend
    if rel is None or not backend:
        return None
    return applied_template(rel.chat_template(backend), backend), f"vLLM {rel.version}'s wheel, backend {backend}"


def version_of(f: dict) -> str:
    """The vLLM version a run's facts name (the result's metadata first)."""
    return next((v for v, src in f["vllm"] if src == "result metadata"), None) or \
        next((v for v, _ in f["vllm"]), "an unrecorded vLLM")


def template_line(facts, scope: str = "across nodes") -> str | None:
    """One line when runs were chat-templated differently, naming each behaviour with the vLLM
    releases and nodes that ran it: the same flags sent other prompts (vLLM 0.34 skips the client's
    template for chat backends), so the runs are not one workload."""
    by: dict[str, dict[str, set[str]]] = {}   # behaviour -> vLLM version -> hosts
    for run, f in facts:
        for value, _ in f["chat_template"]:
            by.setdefault(value, {}).setdefault(version_of(f), set()).add(run.host)
    if len(by) < 2:
        return None
    say = "; ".join(f"{TEMPLATE_WORDS.get(t, t)} under " + ", ".join(
        f"vLLM {v} ({', '.join(sorted(hs))})" for v, hs in sorted(vs.items())) for t, vs in sorted(by.items()))
    return (f"prompt template differs {scope}: {say}: the same bench flags sent differently templated prompts "
            "(vLLM 0.34 leaves the chat backend's prompts to the server), not one workload")


# what a client may send that changes sampling, as --metadata keys
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "frequency_penalty",
                 "presence_penalty", "seed")


def _short(h: Any) -> str:
    return str(h)[:12] if h else NOT_RECORDED


def _sampling(runs, prov_item: dict) -> str:
    """From the result metadata when recorded there (the runner's `sampling_params`, what the client
    sent, or --metadata sampling keys), else from the run spec's bench argv."""
    sent = sorted({json.dumps(r.record.sampling_sent, sort_keys=True, separators=(",", ":"))
                   for r in runs if r.record and r.record.sampling_sent is not None})
    if sent:
        return "sent " + " | ".join(s if s != "{}" else "nothing (the server's generation defaults)" for s in sent)
    for r in runs:
        got = {k: str(r.result.extra[k]) for k in SAMPLING_KEYS if r.result.extra.get(k) is not None}
        if got:
            return ", ".join(f"{k}={v}" for k, v in got.items())
    s = prov_item.get("sampling") or {}
    if s:
        return ", ".join(f"{k}={v}" for k, v in s.items()) + " (run spec)"
    return NOT_RECORDED


def _prompts(runs) -> str:
    """Prompts each run measured: dropped ones (too long for the context) and a one-wave stamp said."""
    x, rec = runs[0].result, runs[0].record
    sent = x.num_prompts if x.num_prompts is not None else NOT_RECORDED
    out = str(sent)
    if rec and rec.prompts_dropped:
        out = (f"{sent} of {rec.prompts_selected if rec.prompts_selected is not None else '?'} (dropped, too long "
               f"for the context: question_id {','.join(map(str, rec.prompts_dropped))})")
    if x.extra.get("steady_state") == "report-setup":
        out += "; one wave by the plan's choice (steady_state: report-setup)"
    return out


def decoding_of(extra: dict) -> str | None:
    """greedy / sampled (...) from what the runner writes: `decoding`, else `sampling_params`,
    else a `temperature` metadata key; None when none is there."""
    if extra.get("decoding"):
        return str(extra["decoding"])
    sp = extra.get("sampling_params")
    if isinstance(sp, str):
        try:
            sp = loads(sp)  # a worker's text: a nesting bomb is a ValueError
        except ValueError:
            sp = None
    temp = sp.get("temperature") if isinstance(sp, dict) else extra.get("temperature")
    if isinstance(sp, dict) and temp is None:
        return "sampled (the server's generation defaults: no temperature sent)"
    if temp is None:
        return None
    try:
        return "greedy" if float(temp) == 0.0 else f"sampled (temperature {float(temp):g})"
    except (TypeError, ValueError):
        return None


def run_facts(camp: "CollectedFolder", run: "Run", prov: dict | None = None, log_version: str | None = None
              ) -> dict[str, list[tuple[str, str]]]:
    """field -> [(value, source)] for one run (several sources may disagree: all are kept)."""
    ex = run.result.extra
    prov = read_provenance(camp.root / run.host) if prov is None else prov
    dists = prov.get("dists") or {}
    out: dict[str, list[tuple[str, str]]] = {f: [] for f in FIELDS}

    def add(field: str, value, source: str) -> None:
        if value not in (None, ""):
            out[field].append((str(value).strip(), source))

    names = ex.get("gpu_names") or ex.get("gpu")
    add("gpu", ",".join(sorted({n.strip() for n in str(names).split(",") if n.strip()})) if names else None,
        "result metadata")
    add("gpu", prov.get("gpu_name"), layout.PROVENANCE)
    add("driver", ex.get("driver") or ex.get("driver_version"), "result metadata")
    add("driver", prov.get("driver"), layout.PROVENANCE)
    add("cuda", ex.get("cuda_version"), "result metadata")
    add("driver_cuda", prov.get("cuda"), layout.PROVENANCE)
    add("torch", ex.get("torch_version"), "result metadata")
    add("torch", dists.get("torch"), layout.PROVENANCE)
    add("vllm", ex.get("vllm_version"), "result metadata")
    add("vllm", dists.get("vllm") or (prov.get("venv") or {}).get("vllm"), layout.PROVENANCE)
    add("vllm", log_version, "server log")
    add("decoding", run.record.decoding if run.record and run.record.decoding else decoding_of(ex),
        "run record" if run.record and run.record.decoding else "result metadata")
    if (tpl := template_of(run)) is not None:
        add("chat_template", *tpl)
    return out


def facts_by_run(camp: "CollectedFolder") -> list[tuple["Run", dict[str, list[tuple[str, str]]]]]:
    provs = {h: read_provenance(camp.root / h) for h in camp.hosts}
    logv = {(k.host, k.config): k.vllm_version for k in camp.kv}
    return [(r, run_facts(camp, r, provs[r.host], logv.get((r.host, r.config)))) for r in camp.runs]


def _with_local_label(values: set[str]) -> dict[str, str]:
    """value -> the value it stands for: a version without a local label (`0.32.0`, as vLLM's server
    log prints itself) is the labelled build of the same release seen elsewhere (`0.32.0+cpu`, the
    dist's version), when exactly one such build was seen; anything else stands for itself."""
    labelled = {v.split("+", 1)[0]: [w for w in values if w.startswith(v.split("+", 1)[0] + "+")] for v in values}
    return {v: (labelled[v][0] if "+" not in v and len(labelled[v]) == 1 else v) for v in values}


def mismatches(camp: "CollectedFolder", vllm_pin: str | None = None) -> list[str]:
    """One line per field whose runs disagree (across nodes or within one), and per pin broken."""
    sim_hosts = {s.split(":", 1)[0] for s in simulated_signals(camp)}
    facts = facts_by_run(camp)
    # the simulator's versions name the simulator, not a vLLM
    real = [(r, f) for r, f in facts if r.host not in sim_hosts]
    vllm_stands = _with_local_label({v for _, f in real for v, _ in f["vllm"]})
    out: list[str] = []
    for field, label in FIELDS.items():
        if field == "chat_template":  # named with the releases that templated so (template_line)
            within = {r.host for r, _ in facts} if len({r.host for r, _ in facts}) == 1 else set()
            line = template_line(facts, f"within {', '.join(within)}" if within else "across nodes")
            out += [line] if line else []
            continue
        where: dict[str, dict[str, set[str]]] = {}   # value -> host -> "config (source)"
        for run, f in real if field == "vllm" else facts:
            for value, source in f[field]:
                stands = vllm_stands[value] if field == "vllm" else value
                where.setdefault(stands, {}).setdefault(run.host, set()).add(f"{run.config}, {source}")
        if len(where) > 1:
            within = sorted(h for h, n in Counter(h for hs in where.values() for h in hs).items() if n > 1)
            say = "; ".join(f"{v} on " + ", ".join(f"{h} ({'; '.join(sorted(srcs))})" for h, srcs in sorted(hs.items()))
                            for v, hs in sorted(where.items()))
            scope = f"within {', '.join(within)}" if within else "across nodes"
            out.append(f"{label} differs {scope}: {say}")
    if vllm_pin:
        seen = {v for _, f in real for v, _ in f["vllm"]} | {vllm_pin}
        stands = _with_local_label(seen)
        off = sorted({f"{r.host} ran {v} ({src})" for r, f in real for v, src in f["vllm"]
                      if stands[v] != stands[vllm_pin]})
        if off:
            out.append(f"the plan pins vllm_version {vllm_pin}, but {'; '.join(off)}")
    return out


def column_values(camp: "CollectedFolder", runs: list["Run"]) -> dict[str, str]:
    """Per field, the values of a group of runs for the per-result table ('a | b' when they differ)."""
    logv = {(k.host, k.config): k.vllm_version for k in camp.kv}
    facts = [run_facts(camp, r, None, logv.get((r.host, r.config))) for r in runs]
    # the server log's `0.32.0` and the dist's `0.32.0+cpu` are one release: the gate's rule, not MIXED
    stands = _with_local_label({v for f in facts for v, _ in f["vllm"]})
    vals: dict[str, list[str]] = {f: [] for f in FIELDS}
    for f in facts:
        for field, got in f.items():
            for v, _ in got:
                v = stands[v] if field == "vllm" else v
                if v not in vals[field]:
                    vals[field].append(v)
    return {f: " | ".join(v) + (" (MIXED)" if len(v) > 1 else "") if v else "not recorded"
            for f, v in vals.items()}


def result_table(camp: "CollectedFolder") -> pd.DataFrame:
    """One row per (node, config): what produced those result files."""
    groups: dict[tuple[str, str], list] = {}
    for r in camp.runs:
        groups.setdefault((r.host, r.config), []).append(r)
    rows = []
    for (host, cfg), runs in sorted(groups.items()):
        p = read_provenance(camp.root / host)
        cv = column_values(camp, runs)
        item = (p.get("items_facts") or {}).get(cfg, {})
        srv = server_facts(camp.root / host / layout.server_log(cfg))
        argv = next((r.record.serve_argv for r in reversed(runs) if r.record and r.record.serve_argv), None)
        if argv:  # the record's list, not the log's line split on spaces
            srv = {k: v for k, v in srv.items() if k not in ("server_argv", "speculative_config")} | argv_facts(argv)
        hashes = sorted({str(r.result.extra["plan_hash"]) for r in runs if r.result.extra.get("plan_hash")})
        spec_cmd = srv.get("speculative_config")
        if spec_cmd is None and srv.get("server_argv"):
            spec_cmd = "none"
        rows.append({
            "node": host, "config": cfg, "plan_hash": ", ".join(hashes) or NOT_RECORDED,
            "model": p.get("model_path") or next((r.result.tokenizer_id for r in runs if r.result.tokenizer_id),
                                                 None) or NOT_RECORDED,
            "model_config_sha256": _short(p.get("model_config_sha256")),
            "weight_index_sha256": _short(p.get("model_index_sha256")) if p.get("model_path") else NOT_RECORDED,
            "dataset_sha256": _short(p.get("dataset_sha256")),
            "prompts": _prompts(runs),
            "gpus": "; ".join(sorted({where(r) for r in runs})),
            "gpu_model": cv["gpu"], "driver": cv["driver"],
            "cuda": cv["cuda"] if cv["driver_cuda"] == NOT_RECORDED else f"{cv['cuda']} (driver {cv['driver_cuda']})",
            "torch": cv["torch"],
            "vllm": cv["vllm"], "decoding": cv["decoding"],
            "chat_template": " | ".join(TEMPLATE_WORDS.get(v, v) for v in cv["chat_template"].removesuffix(
                " (MIXED)").split(" | ")) + (" (MIXED)" if cv["chat_template"].endswith(" (MIXED)") else "")
            if cv["chat_template"] != "not recorded" else NOT_RECORDED,
            "sampling": _sampling(runs, item),
            "server_sampling_defaults": srv.get("server_sampling_defaults", NOT_RECORDED),
            "speculative_config": spec_cmd or NOT_RECORDED,
            "engine_speculative_config": srv.get("engine_speculative_config", NOT_RECORDED),
            "server_argv": srv.get("server_argv") or " ".join(map(str, item.get("serve_argv", []))) or NOT_RECORDED,
        })
    return pd.DataFrame(rows, columns=[c for c, *_ in RESULT_COLS])
