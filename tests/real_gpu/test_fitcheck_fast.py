"""The prompt-length check's fast path (tokenizers + jinja2, no transformers: importing it imports
torch, seconds of every runner preflight on a GPU host) counts exactly what transformers'
AutoTokenizer counts, on the full Spec-Bench file, with the SmolLM2 tokenizer the device runs use.

Needs an interpreter holding transformers and tokenizers (the payload builder's tokenizer venv,
.realgpu/tokvenv, or SPECFLEET_TOK_PYTHON) and the tokenizer the builder made; skipped otherwise."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.shared_data import SPEC_BENCH as SHARED_SPEC_BENCH

REPO = Path(__file__).resolve().parents[2]
SPEC_BENCH = Path(os.environ.get("SPECFLEET_SPEC_BENCH_JSONL") or SHARED_SPEC_BENCH)
TOK = REPO / ".realgpu" / "stage" / "smollm2-tok"
PY = os.environ.get("SPECFLEET_TOK_PYTHON", str(REPO / ".realgpu" / "tokvenv" / "bin" / "python"))

COMPARE = r'''
import json, os, sys
sys.path.insert(0, sys.argv[1])
import fitcheck
model, dataset = sys.argv[2], sys.argv[3]
rows = fitcheck.select(dataset, 0)
out = {}
for name, env in (("fast", "0"), ("transformers", "1")):
    os.environ["SPECFLEET_FITCHECK_TRANSFORMERS"] = env
    label, template, count = fitcheck.tokenizer(model)
    out[name] = {"label": label, "double": [], "single": [], "text": []}
    for row, _ in rows:
        client = template(row["turns"][0])
        out[name]["text"].append(client)
        out[name]["double"].append(count(template(client), False))
        out[name]["single"].append(count(client, True))
print(json.dumps(out))
'''


@pytest.mark.timeout(900)
def test_fast_path_counts_what_transformers_counts_on_spec_bench(tmp_path):
    if not SPEC_BENCH.is_file():
        pytest.skip(f"{SPEC_BENCH} missing (the full Spec-Bench file)")
    if not Path(PY).is_file() or not (TOK / "tokenizer.json").is_file():
        pytest.skip(f"no tokenizer venv {PY} or no built tokenizer {TOK} (build the payload: docs/engines-gpu.md)")
    (tmp_path / "m").mkdir()
    for f in TOK.iterdir():
        (tmp_path / "m" / f.name).write_bytes(f.read_bytes())
    p = subprocess.run([PY, "-c", COMPARE, str(REPO / "specfleet" / "worker"), str(tmp_path / "m"), str(SPEC_BENCH)],
                       capture_output=True, text=True, timeout=880)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["fast"]["label"].startswith("tokenizers + jinja2") and r["transformers"]["label"].startswith("transformers")
    assert len(r["fast"]["double"]) == 480
    assert r["fast"]["text"] == r["transformers"]["text"]
    assert r["fast"]["double"] == r["transformers"]["double"]
    assert r["fast"]["single"] == r["transformers"]["single"]
