"""Token counting and text generation of the simulated engine (no real tokenizer, no model).

Token counts come from a GPT-style pre-tokenizer regex (words, numbers, punctuation; long
words split into 6-character pieces; chat special tokens count 1). Server and client use the
same function, so prompt_tokens are consistent; they approximate a BPE's counts, nothing more.
"""

from __future__ import annotations

import hashlib
import random
import re

SPECIAL = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
_SPECIAL_RE = re.compile("|".join(re.escape(s) for s in SPECIAL))
_PIECE_RE = re.compile(r" ?[A-Za-z]+| ?\d{1,3}| ?[^\sA-Za-z\d]+|\s+")


def count_tokens(text: str) -> int:
    n = 0
    pos = 0
    for m in _SPECIAL_RE.finditer(text):
        n += _count_plain(text[pos:m.start()]) + 1
        pos = m.end()
    return n + _count_plain(text[pos:])


def _count_plain(text: str) -> int:
    n = 0
    for piece in _PIECE_RE.findall(text):
        n += max(1, (len(piece.strip()) + 5) // 6) if piece.strip() else 1
    return n


def chat_template(content: str) -> str:
    """ChatML as used by Qwen3 models (add_generation_prompt=True)."""
    return f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"


_WORDS = (
    "the of and to in is that for it as with was on be by this are from at or which an not "
    "model token speed draft accept verify decode memory bandwidth batch prompt output step "
    "result value system data cache layer weight time first next each more than also can will "
    "answer question summary translation reason because therefore example point case number "
    "however important section final note method approach simple clear provides shows"
).split()


class TextStream:
    """Deterministic pseudo-text, one word-ish token at a time, seeded per request."""

    def __init__(self, prompt: str, seed: int):
        self.rng = random.Random(seed)
        words = re.findall(r"[A-Za-z]{3,}", prompt)[:200]
        self.vocab = words + _WORDS if words else list(_WORDS)

    def tokens(self, n: int) -> str:
        out = []
        for _ in range(n):
            w = self.rng.choice(self.vocab)
            r = self.rng.random()
            out.append((" " + w) + ("." if r < 0.06 else ("," if r < 0.12 else "")))
        return "".join(out)


def prompt_seed(prompt: str) -> int:
    return int.from_bytes(hashlib.sha256(prompt.encode("utf-8", "replace")).digest()[:8], "big")


def planned_output_len(prompt: str, max_tokens: int, greedy: bool, rng: random.Random) -> int:
    """Tokens the simulated model generates before EOS (capped by max_tokens).

    Most Spec-Bench answers hit a 512-token cap; ~1 in 10 ends earlier (report: 8,159 of
    16 x 512 tokens). Greedy decoding is deterministic per prompt, sampling is not.
    """
    r = random.Random(prompt_seed(prompt)) if greedy else rng
    if r.random() < 0.10:
        return max(1, int(max_tokens * r.uniform(0.80, 0.99)))
    return max_tokens
