#!/usr/bin/env python3
"""Correctness of sparseserve's CUDA kernels against a PyTorch reference, on the GPU.

The kernels are reached through the C API of kernels/cuda/ops_c_api.h, built as
libsparseserve_cuda_ops.so and loaded here with ctypes (--lib). Every check:
  * draws fresh random bf16 inputs on the GPU from a seeded generator (the seed of each case is
    printed, so `--seed S --only REGEX` reproduces one case),
  * fills our output buffer with NaN first, so an element the kernel never writes fails,
  * computes the reference from the SAME bf16 inputs in float64 (float32 with TF32 off where a
    float64 one would be slow),
  * passes when rel = ||out - ref|| / ||ref|| (float64) is under the bound (bf16 outputs 1e-2,
    f32-output linear 5e-3; copies such as embedding and write_kv must be bit-exact) and no
    NaN/Inf remains.

Attention uses the paged layout kv_layer [num_blocks*2, block_tokens, kv_heads, head_dim]
(block b's keys in row 2b, values in row 2b+1) with shuffled, non-contiguous block tables. Blocks
that no sequence owns are filled with NaN (a kernel must never read them) and the unused tail of
each sequence's last block with large finite garbage (read, unmasked, it shows as an error).

--self-test runs every case against a pure-PyTorch stand-in for the library instead (an
independent implementation: attention there goes through SDPA with an explicit mask); it checks
this script itself and needs no --lib. --device cpu --small makes that runnable without a GPU.

One line per case: op, parameters, rel error, bound, PASS/FAIL. Exit code 1 if any case fails.
"""

import argparse
import ctypes
import math
import random
import re
import sys
import time

import torch

import gpu_common
from gpu_common import log

BF16 = torch.bfloat16
F32 = torch.float32
BOUND_BF16 = 1e-2
BOUND_F32_LINEAR = 5e-3
EXACT = 0.0


class OpError(RuntimeError):
    """An op returned nonzero (the message carries ss_last_error())."""


# --------------------------------------------------------------------------------------------
# The library under test, through ctypes.
# --------------------------------------------------------------------------------------------

def _check_tensor(t, name, dtype, dims=None, device=None):
    if t.dtype != dtype:
        raise TypeError("%s: dtype %s, want %s" % (name, t.dtype, dtype))
    if not t.is_contiguous():
        raise TypeError("%s: not contiguous" % name)
    if dims is not None and t.dim() != dims:
        raise TypeError("%s: %d dims, want %d" % (name, t.dim(), dims))
    if device is not None and t.device.type != device:
        raise TypeError("%s: on %s, want %s" % (name, t.device, device))


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr())


class CudaOps:
    """libsparseserve_cuda_ops.so: one backend, every op on the legacy default stream."""

    name = "sparseserve"

    def __init__(self, path):
        self.lib = lib = ctypes.CDLL(path)
        vp, i64, i32, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
        pi32 = ctypes.POINTER(ctypes.c_int32)
        sigs = {
            "ss_backend_create": ([], vp),
            "ss_backend_destroy": ([vp], None),
            "ss_last_error": ([], ctypes.c_char_p),
            "ss_synchronize": ([vp], i32),
            "ss_embedding": ([vp, vp, i64, i64, vp, i64, vp], i32),
            "ss_rms_norm": ([vp, vp, vp, i64, i64, f32, vp], i32),
            "ss_add_rms_norm": ([vp, vp, vp, vp, i64, i64, f32, vp], i32),
            "ss_linear": ([vp, vp, vp, vp, i64, i64, i64, vp, i32], i32),
            "ss_rope": ([vp, vp, vp, i64, i32, i32, i32, vp, vp], i32),
            "ss_silu_mul": ([vp, vp, vp, i64, i64, vp], i32),
            "ss_write_kv": ([vp, vp, vp, vp, i64, vp, i64, i32, i32, i32], i32),
            "ss_attention": ([vp, vp, vp, i64, i32, i32, i32, i32, i32, pi32, pi32, pi32, f32, vp],
                             i32),
        }
        # Entry points an older library (a baseline build) may lack: bound when present.
        optional = {
            "ss_minference_attention": ([vp, vp, vp, i64, i32, i32, i32, i32, i32, pi32, pi32,
                                         pi32, f32, i32, i32, i32, i32, i32, vp], i32),
            "ss_minference_stats": ([vp, ctypes.POINTER(ctypes.c_float)], i32),
        }
        for fname, (argtypes, restype) in sigs.items():
            fn = getattr(lib, fname)  # AttributeError names a missing symbol
            fn.argtypes = argtypes
            fn.restype = restype
        for fname, (argtypes, restype) in optional.items():
            if hasattr(lib, fname):
                getattr(lib, fname).argtypes = argtypes
                getattr(lib, fname).restype = restype
        self.be = lib.ss_backend_create()
        if not self.be:
            raise OpError("ss_backend_create failed: %s" % self.last_error())

    def last_error(self):
        msg = self.lib.ss_last_error()
        return msg.decode("utf-8", "replace") if msg else "(no message)"

    def _call(self, fname, *args):
        rc = getattr(self.lib, fname)(self.be, *args)
        if rc != 0:
            raise OpError("%s returned %d: %s" % (fname, rc, self.last_error()))

    def sync(self):
        rc = self.lib.ss_synchronize(self.be)
        if rc != 0:
            raise OpError("ss_synchronize returned %d: %s" % (rc, self.last_error()))
        torch.cuda.synchronize()

    def close(self):
        if self.be:
            self.lib.ss_backend_destroy(self.be)
            self.be = None

    def embedding(self, table, ids, out):
        _check_tensor(table, "table", BF16, 2, "cuda")
        _check_tensor(ids, "ids", torch.int32, 1, "cuda")
        _check_tensor(out, "out", BF16, 2, "cuda")
        self._call("ss_embedding", _ptr(table), table.shape[0], table.shape[1], _ptr(ids),
                   ids.shape[0], _ptr(out))

    def rms_norm(self, x, w, eps, out):
        _check_tensor(x, "x", BF16, 2, "cuda")
        _check_tensor(w, "w", BF16, 1, "cuda")
        _check_tensor(out, "out", BF16, 2, "cuda")
        self._call("ss_rms_norm", _ptr(x), _ptr(w), x.shape[0], x.shape[1], eps, _ptr(out))

    def add_rms_norm(self, residual, x, w, eps, out):
        for t, nm in ((residual, "residual"), (x, "x"), (out, "out")):
            _check_tensor(t, nm, BF16, 2, "cuda")
        _check_tensor(w, "w", BF16, 1, "cuda")
        self._call("ss_add_rms_norm", _ptr(residual), _ptr(x), _ptr(w), x.shape[0], x.shape[1],
                   eps, _ptr(out))

    def linear(self, x, w, bias, out):
        _check_tensor(x, "x", BF16, 2, "cuda")
        _check_tensor(w, "w", BF16, 2, "cuda")
        if bias is not None:
            _check_tensor(bias, "bias", BF16, 1, "cuda")
        out_f32 = out.dtype == F32
        _check_tensor(out, "out", F32 if out_f32 else BF16, 2, "cuda")
        self._call("ss_linear", _ptr(x), _ptr(w), _ptr(bias) if bias is not None else None,
                   x.shape[0], x.shape[1], w.shape[0], _ptr(out), 1 if out_f32 else 0)

    def rope(self, q, k, positions, inv_freq):
        _check_tensor(q, "q", BF16, 3, "cuda")
        _check_tensor(k, "k", BF16, 3, "cuda")
        _check_tensor(positions, "positions", torch.int32, 1, "cuda")
        _check_tensor(inv_freq, "inv_freq", F32, 1, "cuda")
        self._call("ss_rope", _ptr(q), _ptr(k), q.shape[0], q.shape[1], k.shape[1], q.shape[2],
                   _ptr(positions), _ptr(inv_freq))

    def silu_mul(self, gate, up, out):
        for t, nm in ((gate, "gate"), (up, "up"), (out, "out")):
            _check_tensor(t, nm, BF16, 2, "cuda")
        self._call("ss_silu_mul", _ptr(gate), _ptr(up), gate.shape[0], gate.shape[1], _ptr(out))

    def write_kv(self, k, v, slots, kv_layer):
        _check_tensor(k, "k", BF16, 3, "cuda")
        _check_tensor(v, "v", BF16, 3, "cuda")
        _check_tensor(slots, "slots", torch.int32, 1, "cuda")
        _check_tensor(kv_layer, "kv_layer", BF16, 4, "cuda")
        self._call("ss_write_kv", _ptr(k), _ptr(v), _ptr(slots), k.shape[0], _ptr(kv_layer),
                   kv_layer.shape[0] // 2, kv_layer.shape[1], kv_layer.shape[2], kv_layer.shape[3])

    def prepare_attention(self, q, kv_layer, block_tokens, q_lens, kv_lens, block_tables, scale,
                          out):
        """Marshals the arguments once; returns a zero-argument callable that runs ss_attention
        (so a timing loop pays no Python list-to-array conversion). q, out [total_q, heads, hd];
        q_lens, kv_lens, block_tables: lists of Python ints. The tensors must stay alive."""
        _check_tensor(q, "q", BF16, 3, "cuda")
        _check_tensor(out, "out", BF16, 3, "cuda")
        _check_tensor(kv_layer, "kv_layer", BF16, 4, "cuda")
        if len(q_lens) != len(kv_lens):
            raise ValueError("q_lens and kv_lens differ in length")
        ql = (ctypes.c_int32 * len(q_lens))(*q_lens)
        kl = (ctypes.c_int32 * len(kv_lens))(*kv_lens)
        bt = (ctypes.c_int32 * max(1, len(block_tables)))(*block_tables)
        args = (self.be, _ptr(q), _ptr(kv_layer), kv_layer.shape[0] // 2, block_tokens,
                q.shape[1], kv_layer.shape[2], q.shape[2], len(q_lens), ql, kl, bt, scale,
                _ptr(out))
        fn = self.lib.ss_attention

        def run():
            rc = fn(*args)
            if rc != 0:
                raise OpError("ss_attention returned %d: %s" % (rc, self.last_error()))
        run.keepalive = (ql, kl, bt, q, kv_layer, out)
        return run

    def prepare_minference(self, q, kv_layer, block_tokens, q_lens, kv_lens, block_tables, scale,
                           pattern, v, s, planted, build_index, out):
        """As prepare_attention, for ss_minference_attention: every head's pattern (0 A-shape,
        1 vertical-slash, 2 block-sparse, 3 dense) with sizes v, s, or the planted index; with
        build_index the layer's index is built before the attention (else the last one is
        reused)."""
        if not hasattr(self.lib, "ss_minference_attention"):
            raise OpError("this library has no ss_minference_attention")
        _check_tensor(q, "q", BF16, 3, "cuda")
        _check_tensor(out, "out", BF16, 3, "cuda")
        _check_tensor(kv_layer, "kv_layer", BF16, 4, "cuda")
        ql = (ctypes.c_int32 * len(q_lens))(*q_lens)
        kl = (ctypes.c_int32 * len(kv_lens))(*kv_lens)
        bt = (ctypes.c_int32 * max(1, len(block_tables)))(*block_tables)
        args = (self.be, _ptr(q), _ptr(kv_layer), kv_layer.shape[0] // 2, block_tokens,
                q.shape[1], kv_layer.shape[2], q.shape[2], len(q_lens), ql, kl, bt, scale,
                pattern, v, s, 1 if planted else 0, 1 if build_index else 0, _ptr(out))
        fn = self.lib.ss_minference_attention

        def run():
            rc = fn(*args)
            if rc != 0:
                raise OpError("ss_minference_attention returned %d: %s" % (rc, self.last_error()))
        run.keepalive = (ql, kl, bt, q, kv_layer, out)
        return run

    def minference_stats(self, num_seqs):
        """Per sequence (pairs computed, causal pairs) summed since the MInference plan was
        made."""
        host = (ctypes.c_float * (2 * num_seqs))()
        self._call("ss_minference_stats", host)
        return [(host[2 * i], host[2 * i + 1]) for i in range(num_seqs)]

    def attention(self, q, kv_layer, block_tokens, q_lens, kv_lens, block_tables, scale, out):
        """q, out [total_q, heads, hd]; q_lens, kv_lens, block_tables: lists of Python ints."""
        self.prepare_attention(q, kv_layer, block_tokens, q_lens, kv_lens, block_tables, scale,
                               out)()


# --------------------------------------------------------------------------------------------
# A pure-PyTorch stand-in with the same calls (--self-test): checks this script, not kernels.
# --------------------------------------------------------------------------------------------

class TorchOps:
    name = "torch-stand-in"

    def sync(self):
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def close(self):
        pass

    def embedding(self, table, ids, out):
        out.copy_(table[ids.long()])

    def rms_norm(self, x, w, eps, out):
        xf = x.float()
        out.copy_(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float())

    def add_rms_norm(self, residual, x, w, eps, out):
        r = residual.float() + x.float()
        residual.copy_(r)
        out.copy_(r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps) * w.float())

    def linear(self, x, w, bias, out):
        y = x.float() @ w.float().t()
        if bias is not None:
            y = y + bias.float()
        out.copy_(y)

    def rope(self, q, k, positions, inv_freq):
        ang = positions.float()[:, None] * inv_freq[None, :]
        cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
        for t in (q, k):
            half = t.shape[-1] // 2
            x1, x2 = t[..., :half].float(), t[..., half:].float()
            t.copy_(torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1))

    def silu_mul(self, gate, up, out):
        out.copy_(torch.nn.functional.silu(gate.float()) * up.float())

    def write_kv(self, k, v, slots, kv_layer):
        bt = kv_layer.shape[1]
        s = slots.long()
        blk, off = s // bt, s % bt
        kv_layer[2 * blk, off] = k
        kv_layer[2 * blk + 1, off] = v

    def attention(self, q, kv_layer, block_tokens, q_lens, kv_lens, block_tables, scale, out):
        heads, hd = q.shape[1], q.shape[2]
        kvh = kv_layer.shape[2]
        q0, b0 = 0, 0
        for ql, kl in zip(q_lens, kv_lens):
            nb = (kl + block_tokens - 1) // block_tokens
            table = torch.tensor(block_tables[b0:b0 + nb], device=q.device, dtype=torch.long)
            k = kv_layer[2 * table].reshape(nb * block_tokens, kvh, hd)[:kl]
            v = kv_layer[2 * table + 1].reshape(nb * block_tokens, kvh, hd)[:kl]
            qs = q[q0:q0 + ql].float().transpose(0, 1)[None]           # [1, H, ql, hd]
            ks = k.float().repeat_interleave(heads // kvh, dim=1).transpose(0, 1)[None]
            vs = v.float().repeat_interleave(heads // kvh, dim=1).transpose(0, 1)[None]
            qpos = torch.arange(kl - ql, kl, device=q.device)
            mask = torch.arange(kl, device=q.device)[None, :] <= qpos[:, None]
            o = torch.nn.functional.scaled_dot_product_attention(
                qs, ks, vs, attn_mask=mask, scale=(scale or 1.0 / math.sqrt(hd)))
            out[q0:q0 + ql] = o[0].transpose(0, 1).to(out.dtype)
            q0 += ql
            b0 += nb


# --------------------------------------------------------------------------------------------
# References and comparisons.
# --------------------------------------------------------------------------------------------

def rel_error(out, ref):
    """||out - ref|| / ||ref|| in float64 (absolute norm if ref is all zero)."""
    o = out.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    num = torch.linalg.vector_norm(o - r).item()
    den = torch.linalg.vector_norm(r).item()
    return num / den if den > 0 else num


def worse(a, b):
    """The larger of two errors, NaN counting as the largest."""
    if math.isnan(a):
        return a
    if math.isnan(b):
        return b
    return max(a, b)


def all_finite(t):
    return bool(torch.isfinite(t).all().item())


def ref_dtype(elements):
    """float64 for small problems, float32 (TF32 off) for big ones."""
    return torch.float64 if elements <= 1e10 else torch.float32


def rms_norm_ref(x, w, eps):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def rope_ref(t, positions, inv_freq):
    ang = positions.double()[:, None] * inv_freq.double()[None, :]
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    half = t.shape[-1] // 2
    x1, x2 = t[..., :half].double(), t[..., half:].double()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def gather_kv(kv_layer, table, kv_len, block_tokens):
    """A sequence's K and V as contiguous [kv_len, kv_heads, hd] (position p lives in block
    table[p // block_tokens] at offset p % block_tokens; keys row 2b, values row 2b+1)."""
    p = torch.arange(kv_len, device=kv_layer.device)
    blocks = torch.as_tensor(table, device=kv_layer.device, dtype=torch.long)[p // block_tokens]
    off = p % block_tokens
    return kv_layer[2 * blocks, off], kv_layer[2 * blocks + 1, off]


def attention_ref_seq(q, k, v, scale):
    """Causal GQA attention for one sequence: q [ql, H, hd], k/v [kl, KVH, hd] (bf16 values).
    Query row i sits at absolute position kl - ql + i and sees keys 0..that position.
    Computed per KV head group without materialising repeated K/V."""
    ql, heads, hd = q.shape
    kl, kvh, _ = k.shape
    g = heads // kvh
    dt = torch.float64 if ql * kl * heads <= 4e6 and kl * kvh * hd <= 2e7 else torch.float32
    qh = q.to(dt).view(ql, kvh, g, hd).permute(1, 2, 0, 3)          # [KVH, g, ql, hd]
    kh = k.to(dt).permute(1, 2, 0)[:, None]                          # [KVH, 1, hd, kl]
    vh = v.to(dt).permute(1, 0, 2)[:, None]                          # [KVH, 1, kl, hd]
    s = torch.matmul(qh, kh) * scale                                 # [KVH, g, ql, kl]
    qpos = torch.arange(kl - ql, kl, device=q.device)
    allowed = torch.arange(kl, device=q.device)[None, :] <= qpos[:, None]
    s = s.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(s, dim=-1)
    o = torch.matmul(p, vh)                                          # [KVH, g, ql, hd]
    return o.permute(2, 0, 1, 3).reshape(ql, heads, hd)


# --------------------------------------------------------------------------------------------
# Cases. Each returns a list of (what, rel, bound) checks plus optional notes; a case passes when
# every check has rel <= bound and everything written is finite.
# --------------------------------------------------------------------------------------------

class Ctx:
    def __init__(self, ops, device, seed):
        self.ops = ops
        self.device = device
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)
        self.rng = random.Random(seed)  # host-side choices (ids, positions, block tables)

    def randn(self, *shape, dtype=BF16, std=1.0):
        t = torch.empty(shape, dtype=dtype, device=self.device)
        return t.normal_(0.0, std, generator=self.gen)

    def nan_like(self, shape, dtype=BF16):
        return torch.full(shape, float("nan"), dtype=dtype, device=self.device)

    def i32(self, values):
        return torch.tensor(values, dtype=torch.int32, device=self.device)


def case_embedding(c, vocab, hidden, n):
    table = c.randn(vocab, hidden)
    ids_list = [0, vocab - 1] + [c.rng.randrange(vocab) for _ in range(max(0, n - 2))]
    ids_list = ids_list[:n]
    c.rng.shuffle(ids_list)
    ids = c.i32(ids_list)
    out = c.nan_like((n, hidden))
    c.ops.embedding(table, ids, out)
    c.ops.sync()
    ref = table[ids.long()]
    exact = torch.equal(out.view(torch.int16), ref.view(torch.int16))
    return [("out", rel_error(out, ref) if not exact else 0.0, EXACT, all_finite(out))], \
        "" if exact else "not bit-exact"


def case_rms_norm(c, n, d, alias=False):
    eps = 1e-5
    x = c.randn(n, d)
    w = c.randn(d)
    ref = rms_norm_ref(x, w, eps)
    out = x if alias else c.nan_like((n, d))
    c.ops.rms_norm(x, w, eps, out)
    c.ops.sync()
    return [("out", rel_error(out, ref), BOUND_BF16, all_finite(out))], ""


def case_add_rms_norm(c, n, d, alias=False):
    eps = 1e-5
    residual = c.randn(n, d)
    x = c.randn(n, d)
    w = c.randn(d)
    res_ref = residual.double() + x.double()
    out_ref = rms_norm_ref(res_ref, w, eps)
    out = x if alias else c.nan_like((n, d))
    c.ops.add_rms_norm(residual, x, w, eps, out)
    c.ops.sync()
    return [("residual", rel_error(residual, res_ref), BOUND_BF16, all_finite(residual)),
            ("out", rel_error(out, out_ref), BOUND_BF16, all_finite(out))], ""


def case_linear(c, n, d_in, d_out, bias, out_f32):
    x = c.randn(n, d_in)
    w = c.randn(d_out, d_in, std=1.0 / math.sqrt(d_in))
    b = c.randn(d_out) if bias else None
    dt = ref_dtype(n * d_in * d_out)
    ref = x.to(dt) @ w.to(dt).t()
    if b is not None:
        ref = ref + b.to(dt)
    out = c.nan_like((n, d_out), dtype=F32 if out_f32 else BF16)
    c.ops.linear(x, w, b, out)
    c.ops.sync()
    bound = BOUND_F32_LINEAR if out_f32 else BOUND_BF16
    return [("out", rel_error(out, ref), bound, all_finite(out))], "ref %s" % str(dt)[6:]


def case_rope(c, n, heads, kv_heads, hd):
    q = c.randn(n, heads, hd)
    k = c.randn(n, kv_heads, hd)
    pos_list = [0, 131071] + [c.rng.randrange(131072) for _ in range(max(0, n - 2))]
    pos_list = pos_list[:n]
    c.rng.shuffle(pos_list)
    positions = c.i32(pos_list)
    inv_freq = (500000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)).to(F32)
    inv_freq = inv_freq.to(c.device)
    q_ref = rope_ref(q, positions, inv_freq)
    k_ref = rope_ref(k, positions, inv_freq)
    c.ops.rope(q, k, positions, inv_freq)
    c.ops.sync()
    return [("q", rel_error(q, q_ref), BOUND_BF16, all_finite(q)),
            ("k", rel_error(k, k_ref), BOUND_BF16, all_finite(k))], ""


def case_silu_mul(c, n, ffn, alias=False):
    gate = c.randn(n, ffn, std=2.0)
    up = c.randn(n, ffn)
    g = gate.double()
    ref = g * torch.sigmoid(g) * up.double()
    out = gate if alias else c.nan_like((n, ffn))
    c.ops.silu_mul(gate, up, out)
    c.ops.sync()
    return [("out", rel_error(out, ref), BOUND_BF16, all_finite(out))], ""


def case_write_kv(c, n, num_blocks, bt, kvh, hd):
    num_slots = num_blocks * bt
    must = [0, bt - 1, bt, 2 * bt - 1, num_slots - bt, num_slots - 1]
    must = list(dict.fromkeys(s for s in must if 0 <= s < num_slots))
    c.rng.shuffle(must)
    must = must[:n]
    rest = [s for s in c.rng.sample(range(num_slots), min(num_slots, n + len(must)))
            if s not in must]
    slot_list = (must + rest)[:n]
    c.rng.shuffle(slot_list)
    k = c.randn(n, kvh, hd)
    v = c.randn(n, kvh, hd)
    kv = c.randn(num_blocks * 2, bt, kvh, hd)
    before = kv.clone()
    c.ops.write_kv(k, v, c.i32(slot_list), kv)
    c.ops.sync()
    s = torch.tensor(slot_list, dtype=torch.long, device=c.device)
    blk, off = s // bt, s % bt
    expect = before.clone()
    expect[2 * blk, off] = k
    expect[2 * blk + 1, off] = v
    written = torch.zeros(num_blocks * 2, bt, dtype=torch.bool, device=c.device)
    written[2 * blk, off] = True
    written[2 * blk + 1, off] = True
    same = (kv.view(torch.int16) == expect.view(torch.int16)).all(dim=-1).all(dim=-1)
    bad_written = int((~same & written).sum().item())
    bad_untouched = int((~same & ~written).sum().item())
    ok = bad_written == 0 and bad_untouched == 0
    rel = 0.0 if ok else rel_error(kv, expect)
    note = "" if ok else "%d written slots wrong, %d untouched slots changed" % (
        bad_written, bad_untouched)
    return [("kv", rel, EXACT, all_finite(kv))], note


def build_paged_batch(c, seqs, heads, kvh, hd, bt, q_scale=1.0):
    """Random paged KV for sequences [(q_len, kv_len)]: shuffled block tables, NaN in blocks no
    sequence owns, large finite garbage past each sequence's kv_len in its last block."""
    nblk = [(kl + bt - 1) // bt for _, kl in seqs]
    total = sum(nblk)
    num_blocks = total + max(2, total // 8)
    perm = list(range(num_blocks))
    c.rng.shuffle(perm)
    tables, at = [], 0
    for nb in nblk:
        tables.append(perm[at:at + nb])
        at += nb
    kv = c.randn(num_blocks * 2, bt, kvh, hd)
    unused = torch.tensor(perm[total:], dtype=torch.long, device=c.device)
    kv[2 * unused] = float("nan")
    kv[2 * unused + 1] = float("nan")
    for (_, kl), table in zip(seqs, tables):
        tail = kl % bt
        if tail:
            last = table[-1]
            kv[2 * last, tail:] = c.randn(bt - tail, kvh, hd, std=30.0)
            kv[2 * last + 1, tail:] = c.randn(bt - tail, kvh, hd, std=30.0)
    total_q = sum(ql for ql, _ in seqs)
    q = c.randn(total_q, heads, hd, std=q_scale)
    return q, kv, tables


def case_attention(c, seqs, heads, kvh, hd, bt, scale=0.0, q_scale=1.0):
    q, kv, tables = build_paged_batch(c, seqs, heads, kvh, hd, bt, q_scale)
    out = c.nan_like(tuple(q.shape))
    q_lens = [ql for ql, _ in seqs]
    kv_lens = [kl for _, kl in seqs]
    flat = [b for t in tables for b in t]
    c.ops.attention(q, kv, bt, q_lens, kv_lens, flat, scale, out)
    c.ops.sync()
    eff_scale = scale if scale else 1.0 / math.sqrt(hd)
    worst, worst_i, q0 = 0.0, 0, 0
    finite = all_finite(out)
    for i, ((ql, kl), table) in enumerate(zip(seqs, tables)):
        k, v = gather_kv(kv, table, kl, bt)
        ref = attention_ref_seq(q[q0:q0 + ql], k, v, eff_scale)
        r = rel_error(out[q0:q0 + ql], ref)
        if not math.isnan(worst) and (math.isnan(r) or r > worst):
            worst, worst_i = r, i
        q0 += ql
    note = "worst seq %d %s" % (worst_i, seqs[worst_i]) if len(seqs) > 1 else ""
    return [("out", worst, BOUND_BF16, finite)], note


def build_cases(small=False):
    """[(op, params_str, fn(ctx) -> (checks, note))] in a fixed order (seeds follow the order)."""
    cases = []

    def add(op, params, fn, *a, **kw):
        cases.append((op, params, lambda c: fn(c, *a, **kw)))

    for hidden in (333, 4096):
        for n in (1, 7, 513):
            add("embedding", "vocab=1000 hidden=%d n=%d" % (hidden, n), case_embedding,
                1000, hidden, n)
    for d in (64, 333, 4096):
        for n in (1, 7, 513):
            add("rms_norm", "n=%d d=%d" % (n, d), case_rms_norm, n, d)
    add("rms_norm", "n=7 d=4096 out=x (alias)", case_rms_norm, 7, 4096, alias=True)
    for d in (64, 333, 4096):
        for n in (1, 7, 513):
            add("add_rms_norm", "n=%d d=%d" % (n, d), case_add_rms_norm, n, d)
    add("add_rms_norm", "n=7 d=4096 out=x (alias)", case_add_rms_norm, 7, 4096, alias=True)
    shapes = [(333, 517), (4096, 4096), (4096, 14336)]
    ns = (1, 7, 300) if small else (1, 7, 300, 4096)
    if small:
        shapes = [(333, 517), (256, 384)]
    for d_in, d_out in shapes:
        for n in ns:
            for bias in (False, True):
                for out_f32 in (False, True):
                    add("linear", "n=%d in=%d out=%d bias=%d out=%s" % (
                        n, d_in, d_out, bias, "f32" if out_f32 else "bf16"),
                        case_linear, n, d_in, d_out, bias, out_f32)
    for hd in (64, 128):
        for n in (1, 33, 1000):
            add("rope", "n=%d heads=32 kv=8 hd=%d pos<131072" % (n, hd), case_rope, n, 32, 8, hd)
    for ffn in (333, 14336):
        for n in (1, 7, 513):
            add("silu_mul", "n=%d ffn=%d" % (n, ffn), case_silu_mul, n, ffn)
    add("silu_mul", "n=7 ffn=14336 out=gate (alias)", case_silu_mul, 7, 14336, alias=True)
    for bt in (16, 64):
        for hd in (64, 128):
            for n in (1, 7, 100):
                add("write_kv", "n=%d blocks=40 bt=%d kv=8 hd=%d" % (n, bt, hd), case_write_kv,
                    n, 40, bt, 8, hd)

    heads = 32
    prefill = (1, 17, 64, 65, 200) if small else (1, 17, 64, 65, 200, 1000)
    decode = (1, 63, 64, 65, 4097) if small else (1, 63, 64, 65, 4097, 40000)
    mixed = [(1, 1), (37, 300), (1, 4097), (200, 200), (1, 65), (64, 64), (17, 17), (1, 9000)]
    decodes = [(1, kl) for kl in (1, 15, 16, 17, 500, 1024, 3000, 8191)]
    if small:
        mixed = [(1, 1), (37, 300), (1, 700), (20, 20), (1, 65)]
        decodes = [(1, kl) for kl in (1, 15, 16, 17, 500)]
    for ratio in (1, 4, 8):
        kvh = heads // ratio
        for hd in (64, 128):
            for bt in (16, 64):
                geo = "H=%d KVH=%d hd=%d bt=%d" % (heads, kvh, hd, bt)
                for s in prefill:
                    add("attention", "%s prefill q=kv=%d" % (geo, s), case_attention,
                        [(s, s)], heads, kvh, hd, bt)
                add("attention", "%s chunk q=37 kv=300" % geo, case_attention,
                    [(37, 300)], heads, kvh, hd, bt)
                for kl in decode:
                    add("attention", "%s decode q=1 kv=%d" % (geo, kl), case_attention,
                        [(1, kl)], heads, kvh, hd, bt)
                add("attention", "%s batch mixed %s" % (geo, mixed), case_attention,
                    mixed, heads, kvh, hd, bt)
                add("attention", "%s batch decode kv=%s" % (geo, [k for _, k in decodes]),
                    case_attention, decodes, heads, kvh, hd, bt)
    add("attention", "H=32 KVH=8 hd=128 bt=64 prefill q=kv=200 sharp(q*20)", case_attention,
        [(200, 200)], 32, 8, 128, 64, q_scale=20.0)
    add("attention", "H=32 KVH=8 hd=128 bt=64 decode q=1 kv=4097 sharp(q*20)", case_attention,
        [(1, 4097)], 32, 8, 128, 64, q_scale=20.0)
    add("attention", "H=32 KVH=8 hd=64 bt=16 chunk q=37 kv=300 scale=0.05", case_attention,
        [(37, 300)], 32, 8, 64, 16, scale=0.05)
    return cases


def context_alive():
    if not torch.cuda.is_available():
        return True
    try:
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--lib", help="path to libsparseserve_cuda_ops.so")
    ap.add_argument("--self-test", action="store_true",
                    help="check against a pure-PyTorch stand-in instead of --lib")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --self-test)")
    ap.add_argument("--small", action="store_true", help="smaller shapes (for --device cpu)")
    ap.add_argument("--seed", type=int, default=1234, help="base seed (default 1234)")
    ap.add_argument("--trials", type=int, default=2,
                    help="fresh random inputs per case; the line shows the worst (default 2)")
    ap.add_argument("--only", help="run only cases whose 'op params' matches this regex")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--out", help="write all results as JSON here")
    args = ap.parse_args()

    cases = build_cases(small=args.small)
    selected = [(i, c) for i, c in enumerate(cases)
                if not args.only or re.search(args.only, "%s %s" % (c[0], c[1]))]
    if args.list:
        for i, (op, params, _) in selected:
            print("%4d %-12s %s" % (i, op, params))
        return 0
    if not args.self_test and not args.lib:
        ap.error("--lib PATH is required (or --self-test)")
    if args.device == "cuda":
        gpu_common.require_cuda()
        gpu_common.disable_tf32()
        info = gpu_common.device_info()
    else:
        if not args.self_test:
            ap.error("--device cpu only works with --self-test")
        info = {"name": "cpu", "torch": torch.__version__}
    ops = TorchOps() if args.self_test else CudaOps(args.lib)
    print("kernel_check: ops=%s lib=%s device=%s torch=%s seed=%d trials=%d cases=%d" % (
        ops.name, args.lib, info.get("name"), torch.__version__, args.seed, args.trials,
        len(selected)), flush=True)

    results, failed, t_start = [], 0, time.time()
    dead = False
    for idx, (op, params, fn) in selected:
        seed0 = args.seed + 1000 * idx
        rec = {"op": op, "params": params, "seed": seed0, "checks": [], "error": None}
        t0 = time.time()
        if dead:
            rec["error"] = "skipped: CUDA context lost in an earlier case"
        else:
            try:
                worst = {}
                notes = []
                for trial in range(args.trials):
                    checks, note = fn(Ctx(ops, args.device, seed0 + trial))
                    if note:
                        notes.append(note)
                    for what, rel, bound, finite in checks:
                        prev = worst.get(what)
                        if prev is not None:
                            rel, finite = worse(prev[0], rel), finite and prev[2]
                        worst[what] = (rel, bound, finite)
                rec["checks"] = [{"what": w, "rel": r, "bound": b, "finite": f}
                                 for w, (r, b, f) in worst.items()]
                if notes:
                    rec["note"] = notes[-1]
            except Exception as e:  # an op's error, a shape error, a CUDA fault
                rec["error"] = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0]
                                           if str(e).strip() else "")
                if not context_alive():
                    dead = True
                    rec["error"] += " (CUDA context lost; remaining cases skipped)"
        rec["seconds"] = round(time.time() - t0, 3)
        ok = rec["error"] is None and bool(rec["checks"]) and all(
            ch["finite"] and ch["rel"] <= ch["bound"] for ch in rec["checks"])
        rec["pass"] = ok
        failed += 0 if ok else 1
        results.append(rec)
        if rec["checks"]:
            rels = " ".join("%s rel=%.3e" % (ch["what"], ch["rel"]) +
                            ("" if ch["finite"] else " NONFINITE") for ch in rec["checks"])
            bound = max(ch["bound"] for ch in rec["checks"])
        else:
            rels, bound = "rel=-", float("nan")
        line = "%-12s %-62s %s bound=%.0e %s" % (op, params, rels, bound,
                                                  "PASS" if ok else "FAIL")
        extra = rec["error"] or rec.get("note", "")
        if extra:
            line += "  [%s]" % extra
        line += "  seed=%d" % seed0
        print(line, flush=True)

    ops.close()
    elapsed = time.time() - t_start
    passed = len(results) - failed
    log("kernel_check: %.1f s" % elapsed)
    gpu_common.write_json(args.out, {
        "script": "kernel_check", "device": info, "ops": ops.name, "lib": args.lib,
        "seed": args.seed, "trials": args.trials, "seconds": round(elapsed, 1),
        "passed": passed, "failed": failed, "results": results})
    print("%d passed, %d failed" % (passed, failed), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
