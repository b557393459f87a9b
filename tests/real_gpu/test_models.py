"""Model directories of a real shape (random weights) for the device."""
import json

from testbed.realgpu import models


def test_shapes_match_the_public_models():
    p8 = models.params_of(models.qwen3_config("qwen3-8b", 49152))
    p32 = models.params_of(models.qwen3_config("qwen3-32b", 49152))
    assert round(p8 / 1e9, 2) == 7.35 and round(2 * p8 / 2**30, 1) == 13.7
    assert round(p32 / 1e9, 2) == 31.71 and round(2 * p32 / 2**30, 1) == 59.1


def test_dummy_writes_config_and_tokenizer(tmp_path):
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {f"t{i}": i for i in range(100)}}}))
    (tok / "tokenizer_config.json").write_text("{}")
    out = tmp_path / "m"
    models.main(["dummy", "--shape", "qwen3-8b", "--tok", str(tok), "--out", str(out)])
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["vocab_size"] == 49152
    assert cfg["num_hidden_layers"] == 36 and cfg["hidden_size"] == 4096
    assert (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()
    assert "Random weights" in (out / "README.md").read_text()


def test_eagle3_drafter_has_the_target_shape(tmp_path):
    target = models.qwen3_config("qwen3-8b", 49152)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "config.json").write_text(json.dumps(target))
    models.main(["eagle3", "--target", str(tmp_path / "t"), "--out", str(tmp_path / "d")])
    cfg = json.loads((tmp_path / "d" / "config.json").read_text())
    # vLLM 0.26 (transformers_utils/configs/eagle.py) renames LlamaForCausalLM to Eagle3LlamaForCausalLM
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["num_hidden_layers"] == 1
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (
        4096, 32, 8, 128)
    assert cfg["vocab_size"] == cfg["draft_vocab_size"] == 49152
    assert "acceptance is ~0" in (tmp_path / "d" / "README.md").read_text()
