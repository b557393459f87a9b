"""`vllm serve` argument checks that vLLM does before starting the engine."""

from __future__ import annotations

import glob
import json
import os


class ConfigError(Exception):
    """Raised with the exception text vLLM prints (e.g. `ValueError: ...`)."""

    def __init__(self, kind: str, msg: str):
        super().__init__(msg)
        self.kind = kind


def invalid_repo(path: str) -> ConfigError:
    return ConfigError("ValueError", (
        f"Invalid repository ID or local directory specified: '{path}'.\n"
        "Please verify the following requirements:\n"
        "1. Provide a valid Hugging Face repository ID.\n"
        "2. Specify a local directory that contains a recognized configuration file.\n"
        "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
        "   - For Mistral models: ensure the presence of a 'params.json'.\n"
        "(specfleet-simvllm is air-gapped: only local directories are accepted)"))


def load_model_config(path: str) -> dict:
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise invalid_repo(path)
    try:
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError("OSError", f"Unable to load config.json of {path}: {e}") from e
    if not isinstance(cfg, dict):
        raise ConfigError("ValueError", f"config.json of {path} is not a JSON object")
    return cfg


def weights_gib(path: str, cfg: dict) -> float:
    sim = cfg.get("simvllm") or {}
    if "weights_gib" in sim:
        return float(sim["weights_gib"])
    files = glob.glob(os.path.join(path, "*.safetensors"))
    if files:
        return sum(os.path.getsize(f) for f in files) / 1024 ** 3
    h = int(cfg.get("hidden_size", 4096))
    layers = int(cfg.get("num_hidden_layers", 32))
    inter = int(cfg.get("intermediate_size", 4 * h))
    vocab = int(cfg.get("vocab_size", 32000))
    params = layers * (4 * h * h + 3 * h * inter) + 2 * vocab * h
    return params * 2 / 1024 ** 3


def kv_bytes_per_token(cfg: dict) -> int:
    layers = int(cfg.get("num_hidden_layers", 32))
    heads = int(cfg.get("num_attention_heads", 32))
    kv_heads = int(cfg.get("num_key_value_heads", heads))
    head_dim = int(cfg.get("head_dim") or int(cfg.get("hidden_size", 4096)) // max(1, heads))
    return max(1, 2 * layers * kv_heads * head_dim * 2)  # K and V, bf16


def parse_speculative_config(raw: str | None) -> dict | None:
    """Validate like vLLM's SpeculativeConfig (config/speculative.py)."""
    if raw is None:
        return None
    try:
        spec = json.loads(raw)
    except ValueError as e:
        raise ConfigError("ValueError", f"Invalid JSON for --speculative-config: {e}") from e
    if not isinstance(spec, dict):
        raise ConfigError("ValueError", "--speculative-config must be a JSON object")
    spec = dict(spec)
    method = spec.get("method")
    if method == "[ngram]":
        method = spec["method"] = "ngram"
    known = ("ngram", "ngram_gpu", "eagle", "eagle3", "medusa", "mlp_speculator", "draft_model", "mtp",
             "suffix")
    if method is None and spec.get("model"):
        method = spec["method"] = "draft_model"
    if method not in known:
        raise ConfigError("ValueError", f"Unsupported speculative method: '{method}'")
    k = spec.get("num_speculative_tokens")
    if method in ("ngram", "ngram_gpu", "suffix"):
        if k is None:
            raise ConfigError("ValueError", "num_speculative_tokens must be provided with speculative model "
                              "unless the draft model config contains an n_predict parameter.")
        lo, hi = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
        if lo is None and hi is None:
            lo = hi = 5
        elif lo is None:
            lo = hi
        elif hi is None:
            hi = lo
        if int(lo) < 1:
            raise ConfigError("ValueError", f"prompt_lookup_min={lo} must be > 0")
        if int(hi) < 1:
            raise ConfigError("ValueError", f"prompt_lookup_max={hi} must be > 0")
        if int(lo) > int(hi):
            raise ConfigError("ValueError", f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}")
        spec["prompt_lookup_min"], spec["prompt_lookup_max"] = int(lo), int(hi)
    else:
        draft = spec.get("model")
        if not draft and method != "mtp":
            raise ConfigError("ValueError", f"speculative model must be provided for method '{method}'")
        if draft:
            dcfg = load_model_config(str(draft))
            if k is None:
                k = dcfg.get("n_predict") or (dcfg.get("speculators_config") or {}).get(
                    "proposal_methods", [{}])[0].get("speculative_tokens")
                if k is None:
                    raise ConfigError("ValueError", "num_speculative_tokens must be provided with "
                                      "speculative model unless the draft model config contains an "
                                      "n_predict parameter.")
        elif k is None:
            k = 1
    if int(k) < 1:
        raise ConfigError("ValueError", f"Expected num_speculative_tokens to be greater than zero ({k}).")
    spec["num_speculative_tokens"] = int(k)
    return spec


def spec_repr(spec: dict | None) -> str:
    if not spec:
        return "None"
    return (f"SpeculativeConfig(method='{spec['method']}', model={spec.get('model')!r}, "
            f"num_spec_tokens={spec['num_speculative_tokens']})")


def parse_len(value: str) -> int:
    """--max-model-len accepts 2048, 2k, 2K (×1000 / ×1024 like vLLM's human_readable_int)."""
    v = str(value).strip()
    mult = {"k": 1000, "K": 1024, "m": 10 ** 6, "M": 1024 ** 2}
    if v and v[-1] in mult:
        return int(float(v[:-1]) * mult[v[-1]])
    return int(v)
