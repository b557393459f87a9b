#!/usr/bin/env python3
"""Device-side checks before any server starts (~25 s): the carried vLLM loads against the image's
torch, and the kernels the benchmark uses compute the right thing on the GPU (fresh random inputs,
fp32 references, ||out - ref|| / ||ref||; bf16 operands land between 1e-3 and 1e-2). Exit 1 on any
failure, so device.sh starts no server on a broken payload.

    PYTHONPATH=<payload site> python3 selftest.py

Covers: vllm._C_stable_libtorch (fatbins compacted to sm_90 by fatbin.py): rms_norm,
fused_add_rms_norm, silu_and_mul, rotary_embedding (neox), reshape_and_cache_flash;
FlashAttention-3 (varlen, causal) against torch SDPA; the n-gram proposer's numba kernel against
a plain-Python reference (`ngram_reference`). The verdict logic (`Checks`) and the reference are
stdlib only and tested on CPU (tests/real_gpu/test_selftest_logic.py).
"""
from __future__ import annotations

import math
import sys
import time

DEFAULT_TOL = 2e-2


class Checks:
    """Verdicts of the self-test; a check passes only with a finite error below its tolerance."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.fails: list[str] = []

    def record(self, name: str, rel: float | None, tol: float = DEFAULT_TOL, finite: bool = True) -> bool:
        if not finite or rel is None or math.isnan(rel):
            self.fails.append(name)
            self.say(f"FAIL {name}: non-finite output")
            return False
        ok = rel < tol
        if not ok:
            self.fails.append(name)
        self.say(f"{'ok  ' if ok else 'FAIL'} {name}: rel err {rel:.2e} (tol {tol:g})")
        return ok

    def equal(self, name: str, got: list, want: list) -> bool:
        ok = list(got) == list(want)
        if not ok:
            self.fails.append(name)
        self.say(f"{'ok  ' if ok else 'FAIL'} {name}: {list(got)} (want {list(want)})")
        return ok

    def say(self, line: str) -> None:
        self.lines.append(line)
        print(line, flush=True)

    def verdict(self, seconds: float) -> tuple[int, str]:
        if not self.lines:
            return 1, "selftest FAILED: nothing was checked"
        if self.fails:
            return 1, f"selftest FAILED: {', '.join(self.fails)} in {seconds:.1f}s"
        return 0, f"selftest PASSED in {seconds:.1f}s"


def ngram_reference(tokens: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    """What an n-gram (prompt lookup) proposer should draft: take the longest suffix of `tokens`, of
    min_n..max_n tokens, that occurs earlier; propose up to k tokens that followed its earliest
    earlier occurrence. [] when no suffix recurs."""
    n_tok = len(tokens)
    for n in range(min(max_n, n_tok - 1), min_n - 1, -1):
        suffix = tokens[n_tok - n:]
        for i in range(0, n_tok - n):
            if tokens[i:i + n] == suffix:
                return tokens[i + n:i + n + k]
    return []


#: (tokens, min_n, max_n, k): cases with one unambiguous answer, for the device's numba kernel.
NGRAM_CASES = (
    ([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3], 2, 5, 4),
    ([7, 8, 9, 10, 11, 12, 20, 21, 9, 10], 2, 4, 3),
    ([5, 6, 7, 8, 9], 2, 4, 3),
)


def rel_err(out, ref) -> tuple[float, bool]:
    """(||out - ref|| / ||ref||, all finite) of two torch tensors."""
    import torch
    out, ref = out.float(), ref.float()
    if not torch.isfinite(out).all():
        return math.nan, False
    return ((out - ref).norm() / ref.norm().clamp_min(1e-12)).item(), True


def device_checks(c: Checks, t0: float) -> None:
    import torch

    def check(name, out, ref, tol=DEFAULT_TOL):
        rel, finite = rel_err(out, ref)
        c.record(name, rel, tol, finite)

    def timed(fn, n=20):
        fn(); torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            fn()
        e.record(); torch.cuda.synchronize()
        return s.elapsed_time(e) / n

    import vllm
    from vllm.platforms import current_platform

    print(f"vllm {vllm.__version__} from {vllm.__file__}; torch {torch.__version__} cuda {torch.version.cuda}; "
          f"platform {type(current_platform).__name__}; device {torch.cuda.get_device_name(0)} "
          f"cc {torch.cuda.get_device_capability(0)}; import {time.time() - t0:.1f}s")
    current_platform.import_kernels()
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(int(time.time()))

    def rnd(*shape, dtype=bf):
        return torch.randn(*shape, device=dev, dtype=torch.float32, generator=g).to(dtype)

    # RMSNorm
    T, H = 4096, 4096
    x, w = rnd(T, H), rnd(H)
    out = torch.full_like(x, float("nan"))
    torch.ops._C.rms_norm(out, x, w, 1e-6)
    xf = x.float()
    ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    check("rms_norm", out, ref)
    print(f"     rms_norm {T}x{H} bf16: {timed(lambda: torch.ops._C.rms_norm(out, x, w, 1e-6)) * 1e3:.1f} us")
    # fused add + RMSNorm (in place)
    x2, r2 = rnd(T, H), rnd(T, H)
    ref_res = x2.float() + r2.float()
    ref2 = ref_res * torch.rsqrt(ref_res.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    torch.ops._C.fused_add_rms_norm(x2, r2, w, 1e-6)
    check("fused_add_rms_norm (out)", x2, ref2)
    check("fused_add_rms_norm (residual)", r2, ref_res)
    # SiLU and mul
    D = 12288
    a = rnd(T, 2 * D)
    o = torch.full((T, D), float("nan"), device=dev, dtype=bf)
    torch.ops._C.silu_and_mul(o, a)
    af = a.float()
    check("silu_and_mul", o, torch.nn.functional.silu(af[:, :D]) * af[:, D:])
    # Rotary (neox style), head 128
    nh, hd, rot_max = 8, 128, 8192
    pos = torch.randint(0, rot_max, (T,), device=dev, generator=g)
    inv = 1.0 / (1e6 ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd))
    fr = torch.outer(torch.arange(rot_max, device=dev, dtype=torch.float32), inv)
    cos_sin = torch.cat([fr.cos(), fr.sin()], dim=-1).to(bf)
    q = rnd(T, nh * hd); k = rnd(T, 2 * hd)
    qr, kr = q.clone(), k.clone()
    torch.ops._C.rotary_embedding(pos, qr, kr, hd, cos_sin, True)

    def rope_ref(t, n):
        t = t.float().view(T, n, hd)
        c, s = cos_sin[pos].float().chunk(2, dim=-1)
        c, s = c[:, None, :], s[:, None, :]
        x1, x2_ = t[..., : hd // 2], t[..., hd // 2:]
        return torch.cat([x1 * c - x2_ * s, x2_ * c + x1 * s], dim=-1).view(T, n * hd)

    check("rotary_embedding q", qr, rope_ref(q, nh))
    check("rotary_embedding k", kr, rope_ref(k, 2))
    # KV cache write (flash layout [blocks, block, heads, dim])
    nb, bs = 256, 16
    kc = torch.zeros(nb, bs, 2, hd, device=dev, dtype=bf); vc = torch.zeros_like(kc)
    slots = torch.randperm(nb * bs, device=dev, generator=g)[:T // 2]
    kk, vv = rnd(T // 2, 2, hd), rnd(T // 2, 2, hd)
    one = torch.ones((), device=dev, dtype=torch.float32)
    torch.ops._C_cache_ops.reshape_and_cache_flash(kk, vv, kc, vc, slots, "auto", one, one)
    check("reshape_and_cache_flash", kc.view(-1, 2, hd)[slots], kk, tol=1e-6)
    # FlashAttention-3 (varlen causal) vs SDPA
    from vllm.vllm_flash_attn.flash_attn_interface import (
        FA3_AVAILABLE, FA3_UNAVAILABLE_REASON, flash_attn_varlen_func, is_fa_version_supported)

    print(f"FA3 available {FA3_AVAILABLE} supported {is_fa_version_supported(3)} {FA3_UNAVAILABLE_REASON or ''}")
    lens = [37, 512, 1024, 129]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device=dev, dtype=torch.int32)
    Hq, Hk = 32, 8
    qq, kq, vq = rnd(sum(lens), Hq, hd), rnd(sum(lens), Hk, hd), rnd(sum(lens), Hk, hd)
    fa = flash_attn_varlen_func(qq, kq, vq, max(lens), cu, max(lens), cu_seqlens_k=cu, causal=True, fa_version=3)
    refs = []
    for i, n in enumerate(lens):
        s, e = cu[i].item(), cu[i + 1].item()
        qi = qq[s:e].transpose(0, 1).float()
        ki = kq[s:e].transpose(0, 1).float().repeat_interleave(Hq // Hk, 0)
        vi = vq[s:e].transpose(0, 1).float().repeat_interleave(Hq // Hk, 0)
        refs.append(torch.nn.functional.scaled_dot_product_attention(qi, ki, vi, is_causal=True).transpose(0, 1))
    check("flash_attn_varlen_func fa3 causal", fa, torch.cat(refs))


def ngram_checks(c: Checks) -> None:
    import numpy as np
    from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as ngram
    for i, (toks, lo, hi, k) in enumerate(NGRAM_CASES):
        got = ngram(np.array(toks, dtype=np.int32), lo, hi, 1024, k)
        c.equal(f"ngram numba proposer case {i + 1}", [int(x) for x in (got if got is not None else [])],
                ngram_reference(toks, lo, hi, k))


def main() -> int:
    t0 = time.time()
    c = Checks()
    try:
        device_checks(c, t0)
        ngram_checks(c)
    except Exception as e:  # an import or kernel-load failure is a failed self-test, not a crash
        c.fails.append(f"{type(e).__name__}")
        c.say(f"FAIL {type(e).__name__}: {e}")
    rc, line = c.verdict(time.time() - t0)
    print(line, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
