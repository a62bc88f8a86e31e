#!/usr/bin/env python3
"""Times TokenSelect attention (selection + sparse attention, one layer) on the CUDA backend
against our dense attention and PyTorch SDPA on the same inputs, in one process.

What it measures, at the Llama-3-8B layer shape (32 query heads, 8 KV heads, head_dim 128,
64-token blocks) with TokenSelect's defaults (k 2048, 128 initial, 512 local tokens):
  1. the device's read bandwidth (the ceiling the decode figures are read against);
  2. decode attention (q_len 1), batch 1 and 4, kv 32K/128K/512K: ours dense (ss_attention),
     SDPA cuDNN and flash (dense), and ours TokenSelect (ss_tokenselect_attention) in two modes:
     re-selection every step (theta 2: the selection cache never hits, so every call scores all
     candidate keys, soft-votes and takes the top-k) and a selection-cache hit (theta -1 after
     one selection: only the sparse attention over 2,688 tokens runs). Reported: microseconds
     and ratios against cuDNN;
  3. the chunked-prefill step the paper's 23.84x is about: 512 new rows over a 1M-token cache,
     ours dense against SDPA (bottom-right causal where the backend takes it) and TokenSelect
     re-selecting (one selection per chunk, its mean query) and reusing.
Sanity checks (printed, in the JSON): TokenSelect with k >= candidates runs dense and must equal
our dense output exactly; with k = candidates - 1 the sparse path attends all keys but one and
must be within bf16 rounding of dense; the selection-cache counters must show the expected
hits. Our dense output is compared with SDPA's (rel error) as in attention_bench.py.

With --ncu every measurement runs three calls only, inside an NVTX range named after it
("cudnn", "flash", "ours_dense", "ts_reselect", "ts_hit"), for Nsight Compute to time the kernels
of one call without the launch gaps of calls made from Python (bench/cuda/ncu_ranges.py sums
them): a TokenSelect step replays from a CUDA graph in the engine, where those gaps are gone.

Both sides read the same bf16 values: K/V are drawn in SDPA's [B, kv_heads, S, hd] layout and
scattered into our paged pool (shuffled block tables). Timing: CUDA events around loops on the
default stream (the one our library uses), warm-up first, median of several samples. Inputs
this size exceed the L2 cache, so one copy of them is timed.
"""

import argparse
import ctypes
import math
import random
import sys
import time

import torch

import gpu_common
from gpu_common import log
from attention_bench import build_pool, fmt, rel_error, time_sdpa, try_sdpa

BF16 = torch.bfloat16


def parse_ints(text):
    return [int(float(x)) for x in text.split(",") if x.strip()]


class TokenSelectOps:
    """ss_tokenselect_attention / ss_tokenselect_stats on top of kernel_check.CudaOps."""

    def __init__(self, path):
        from kernel_check import CudaOps
        self.ops = CudaOps(path)
        lib = self.ops.lib
        vp, i64, i32, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
        pi32 = ctypes.POINTER(ctypes.c_int32)
        pf32 = ctypes.POINTER(ctypes.c_float)
        lib.ss_tokenselect_attention.argtypes = [vp, vp, vp, i64, i32, i32, i32, i32, i32, pi32,
                                                 pi32, pi32, f32, i32, i32, i32, f32, vp, i64, vp]
        lib.ss_tokenselect_attention.restype = i32
        lib.ss_tokenselect_stats.argtypes = [vp, pf32, pf32]
        lib.ss_tokenselect_stats.restype = i32

    @staticmethod
    def slot_words(heads, head_dim, k):
        return 4 + heads * head_dim + k  # tokenselect::StateWordsPerLayer, one layer

    def prepare(self, q, pool, block_tokens, q_lens, kv_lens, tables, k, initial, local, theta,
                state, out):
        """A zero-argument callable running ss_tokenselect_attention (arguments marshalled once).
        state: int32 [num_seqs, slot_words] on the GPU (zeros = no selection yet)."""
        ql = (ctypes.c_int32 * len(q_lens))(*q_lens)
        kl = (ctypes.c_int32 * len(kv_lens))(*kv_lens)
        bt = (ctypes.c_int32 * max(1, len(tables)))(*tables)
        args = (self.ops.be, q.data_ptr(), pool.data_ptr(), pool.shape[0] // 2, block_tokens,
                q.shape[1], pool.shape[2], q.shape[2], len(q_lens), ql, kl, bt, 0.0, k, initial,
                local, theta, state.data_ptr(), state.shape[1], out.data_ptr())
        fn = self.ops.lib.ss_tokenselect_attention

        def run():
            if fn(*args) != 0:
                raise RuntimeError("ss_tokenselect_attention: %s" % self.ops.last_error())
        run.keep = (ql, kl, bt)
        return run

    def stats(self, num_seqs):
        sel = (ctypes.c_float * (2 * num_seqs))()
        pairs = (ctypes.c_float * (2 * num_seqs))()
        if self.ops.lib.ss_tokenselect_stats(self.ops.be, sel, pairs) != 0:
            raise RuntimeError("ss_tokenselect_stats: %s" % self.ops.last_error())
        return list(sel), list(pairs)


def make_inputs(B, q_len, L, args, gen, rng):
    H, KVH, D = args.heads, args.kv_heads, args.head_dim
    q = torch.randn(B * q_len, H, D, dtype=BF16, device="cuda", generator=gen)
    k = torch.randn(B, KVH, L, D, dtype=BF16, device="cuda", generator=gen)
    v = torch.randn(B, KVH, L, D, dtype=BF16, device="cuda", generator=gen)
    q_sdpa = q.view(B, q_len, H, D).transpose(1, 2).contiguous()
    pool, tables = build_pool(k, v, args.block_tokens, rng)
    return q, k, v, q_sdpa, pool, [b for t in tables for b in t]


def in_range(name, fn):
    """fn() inside the NVTX range `name` (what --ncu profiles)."""
    torch.cuda.nvtx.range_push(name)
    try:
        return fn()
    finally:
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


def time_ours(fn, timing, name):
    t = in_range(name, lambda: gpu_common.time_cuda(fn, **timing))
    return {"us": t["median_ms"] * 1e3, "samples_us": [round(x * 1e3, 2) for x in t["samples_ms"]]}


def bench_sdpa(row, q_sdpa, k, v, causal, timing, names=("cudnn", "flash")):
    """SDPA per backend; returns its output [B, H, q_len, D] of the first backend that ran."""
    ref = None
    for name in names:
        fn, mode, out, why = None, None, None, None
        if causal == "lower_right":
            try:
                from torch.nn.attention.bias import causal_lower_right
                bias = causal_lower_right(q_sdpa.shape[2], k.shape[2])
                fn, mode, out, why = try_sdpa_mask(name, q_sdpa, k, v, bias)
            except ImportError as e:
                why = str(e)
        if fn is None:
            fn, mode, out, why2 = try_sdpa(name, q_sdpa, k, v, causal=False)
            if fn is not None and causal == "lower_right":
                mode += "+noncausal"
            why = why2 if fn is None else None
        if fn is None:
            row[name] = {"refused": why}
            log("  %s refused: %s" % (name, why))
            continue
        t = in_range(name, lambda: time_sdpa(name, fn, **timing))
        row[name] = {"mode": mode, "us": t["median_ms"] * 1e3,
                     "samples_us": [round(x * 1e3, 2) for x in t["samples_ms"]]}
        if ref is None:
            ref, row["ref_backend"] = out, name
        else:
            del out
        del fn
        torch.cuda.empty_cache()
    return ref


def try_sdpa_mask(backend_name, q, k, v, bias):
    """SDPA with a CausalBias (bottom-right causal) on one backend, enable_gqa or repeat_kv."""
    import warnings
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    from attention_bench import sdpa_backends
    backend = sdpa_backends()[backend_name]
    ratio = q.shape[1] // k.shape[1]
    reasons = []
    for mode in ("enable_gqa", "repeat_kv"):
        kk, vv, kw = k, v, {"enable_gqa": True}
        if mode == "repeat_kv":
            kk, vv, kw = k.repeat_interleave(ratio, dim=1), v.repeat_interleave(ratio, dim=1), {}

        def fn(kk=kk, vv=vv, kw=kw):
            return F.scaled_dot_product_attention(q, kk, vv, attn_mask=bias, **kw)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with sdpa_kernel([backend]):
                    out = fn()
                torch.cuda.synchronize()
            return fn, mode + "+lower_right", out, None
        except (RuntimeError, TypeError, ValueError) as e:
            reasons.append("%s: %s" % (mode, str(e).strip().splitlines()[0][:160]))
            del kk, vv
            torch.cuda.empty_cache()
    return None, None, None, " | ".join(reasons)


def bench_step(B, q_len, L, args, ts, gen, rng):
    H, D, bt = args.heads, args.head_dim, args.block_tokens
    kv_bytes = B * L * args.kv_heads * D * 2 * 2
    row = {"batch": B, "q_len": q_len, "kv_len": L, "kv_bytes": kv_bytes, "k": args.k,
           "initial": args.initial, "local": args.local}
    timing = dict(warmup=2, reps=args.reps, target_ms=20.0, max_total_s=args.max_s)
    if args.ncu:  # three calls: one warm-up, two timed one by one
        timing = dict(warmup=1, reps=2, target_ms=0.0, max_total_s=args.max_s)
    q, k, v, q_sdpa, pool, tables = make_inputs(B, q_len, L, args, gen, rng)
    log("B=%d q_len=%d L=%d: SDPA" % (B, q_len, L))
    ref = bench_sdpa(row, q_sdpa, k, v, "lower_right" if q_len > 1 else False, timing)
    del k, v
    torch.cuda.empty_cache()
    q_lens, kv_lens = [q_len] * B, [L] * B
    dense_out = None
    if ts is not None:
        log("B=%d q_len=%d L=%d: ours dense" % (B, q_len, L))
        dense_out = torch.full_like(q, float("nan"))
        run = ts.ops.prepare_attention(q, pool, bt, q_lens, kv_lens, tables, 0.0, dense_out)
        row["ours_dense"] = time_ours(run, timing, "ours_dense")
        ts.ops.sync()
        if ref is not None:
            ref_packed = ref.transpose(1, 2).reshape(B * q_len, H, D)
            row["ours_dense"]["rel_vs_" + row["ref_backend"]] = rel_error(dense_out, ref_packed)
            del ref_packed
        words = ts.slot_words(H, D, args.k)
        # Multi-row steps (prompt chunks) always select (kernels/tokenselect_index.h): no hit mode.
        modes = (("reselect", 2.0), ("hit", -1.0)) if q_len == 1 else (("reselect", 2.0),)
        for mode, theta in modes:
            log("B=%d q_len=%d L=%d: TokenSelect %s" % (B, q_len, L, mode))
            state = torch.zeros(B, words, dtype=torch.int32, device="cuda")
            out = torch.full_like(q, float("nan"))
            run = ts.prepare(q, pool, bt, q_lens, kv_lens, tables, args.k, args.initial,
                             args.local, theta, state, out)
            run()  # the first call selects in both modes
            row["ts_" + mode] = time_ours(run, timing, "ts_" + mode)
            ts.ops.sync()
            sel, pairs = ts.stats(B)
            row["ts_" + mode]["hits_queries"] = sel[:2]
            row["ts_" + mode]["density"] = pairs[0] / pairs[1] if pairs[1] else None
            row["ts_" + mode]["rel_vs_ours_dense"] = rel_error(out, dense_out)
            if mode == "reselect" and sel[0] != 0:
                row["ts_" + mode]["check_failed"] = "hits with theta 2"
            if mode == "hit" and not (sel[1] >= 2 and sel[0] == sel[1] - 1):
                row["ts_" + mode]["check_failed"] = "expected every call but the first to hit"
            del state, out, run
        base = row.get("cudnn", {}).get("us")
        for key in ("ours_dense", "ts_reselect", "ts_hit"):
            if base and "us" in row.get(key, {}):
                row[key]["over_cudnn"] = row[key]["us"] / base
        if "us" in row.get("ours_dense", {}):
            for key in ("ts_reselect", "ts_hit"):
                if "us" in row.get(key, {}):
                    row[key]["speedup_vs_ours_dense"] = row["ours_dense"]["us"] / row[key]["us"]
    del q, q_sdpa, pool, ref, dense_out
    torch.cuda.empty_cache()
    return row


def sanity(args, ts, gen, rng):
    """TokenSelect against our dense output: k >= candidates (dense path, equal) and
    k = candidates - 1 (sparse path over all keys but one, within bf16 rounding)."""
    H, D, bt = args.heads, args.head_dim, args.block_tokens
    B, L = 2, args.sanity_length
    q, k, v, q_sdpa, pool, tables = make_inputs(B, 1, L, args, gen, rng)
    del k, v, q_sdpa
    dense = torch.full_like(q, float("nan"))
    ts.ops.prepare_attention(q, pool, bt, [1] * B, [L] * B, tables, 0.0, dense)()
    candidates = (L - 1) - args.initial - args.local
    result = {"kv_len": L, "candidates": candidates}
    for name, kk in (("k_ge_candidates", candidates), ("k_candidates_minus_1", candidates - 1)):
        state = torch.zeros(B, ts.slot_words(H, D, kk), dtype=torch.int32, device="cuda")
        out = torch.full_like(q, float("nan"))
        ts.prepare(q, pool, bt, [1] * B, [L] * B, tables, kk, args.initial, args.local, 2.0,
                   state, out)()
        ts.ops.sync()
        result[name] = rel_error(out, dense)
    return result


def print_table(info, read_gbs, decode, prefill, sanity_result):
    print()
    print("== %s, torch %s; read %.0f GB/s; TokenSelect k=%d initial=%d local=%d ==" % (
        info["name"], info["torch"], read_gbs, decode[0]["k"] if decode else 0,
        decode[0]["initial"] if decode else 0, decode[0]["local"] if decode else 0))
    head = ("us: ours-dense / cudnn / flash / TS-reselect / TS-hit    over cudnn: dense / "
            "reselect / hit   speedup vs our dense: reselect / hit")
    for title, rows in (("decode (q_len 1), per layer", decode),
                        ("chunked prefill (512 rows), per layer", prefill)):
        if not rows:
            continue
        print("%s   %s" % (title, head))
        for r in rows:
            od, c, f = r.get("ours_dense"), r.get("cudnn"), r.get("flash")
            rs, hit = r.get("ts_reselect"), r.get("ts_hit")
            print("  B=%d L=%-8d %9s %9s %9s %9s %9s   %6s %6s %6s   %6s %6s" % (
                r["batch"], r["kv_len"], fmt(od, "us", "%.1f"), fmt(c, "us", "%.1f"),
                fmt(f, "us", "%.1f"), fmt(rs, "us", "%.1f"), fmt(hit, "us", "%.1f"),
                fmt(od, "over_cudnn", "%.2f"), fmt(rs, "over_cudnn", "%.2f"),
                fmt(hit, "over_cudnn", "%.2f"), fmt(rs, "speedup_vs_ours_dense", "%.1fx"),
                fmt(hit, "speedup_vs_ours_dense", "%.1fx")))
            for key in ("ts_reselect", "ts_hit"):
                if isinstance(r.get(key), dict) and "check_failed" in r[key]:
                    print("    CHECK FAILED %s: %s (hits/queries %s)" % (
                        key, r[key]["check_failed"], r[key].get("hits_queries")))
    if sanity_result:
        print("sanity (vs ours dense, kv %d): k >= candidates rel %.2e (must be 0), "
              "k = candidates - 1 rel %.2e (bf16 rounding, < 1e-2)" % (
                  sanity_result["kv_len"], sanity_result["k_ge_candidates"],
                  sanity_result["k_candidates_minus_1"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--lib", help="libsparseserve_cuda_ops.so (omit: time PyTorch only)")
    ap.add_argument("--decode-lengths", default="32768,131072,524288")
    ap.add_argument("--decode-batches", default="1,4")
    ap.add_argument("--prefill-lengths", default="1048576",
                    help="KV lengths of the chunked-prefill step ('' to skip)")
    ap.add_argument("--prefill-rows", type=int, default=512)
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--initial", type=int, default=128)
    ap.add_argument("--local", type=int, default=512)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-tokens", type=int, default=64)
    ap.add_argument("--sanity-length", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=7, help="samples per measurement at most")
    ap.add_argument("--max-s", type=float, default=3.0,
                    help="rough time budget per measurement in seconds (cuts samples)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="write all results as JSON here")
    ap.add_argument("--ncu", action="store_true",
                    help="three calls per measurement in NVTX ranges, for Nsight Compute")
    args = ap.parse_args()

    gpu_common.require_cuda()
    info = gpu_common.device_info()
    ts = TokenSelectOps(args.lib) if args.lib else None
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    rng = random.Random(args.seed)
    t_start = time.time()
    print("tokenselect_bench: device=%s torch=%s cuda=%s lib=%s" % (
        info["name"], info["torch"], info["cuda"], args.lib), flush=True)
    read_gbs, _ = gpu_common.read_bandwidth_gbs()

    sanity_result = None
    if ts is not None:
        log("sanity ...")
        sanity_result = sanity(args, ts, gen, rng)
    decode, prefill = [], []
    for B in parse_ints(args.decode_batches):
        for L in parse_ints(args.decode_lengths):
            decode.append(bench_step(B, 1, L, args, ts, gen, rng))
            r = decode[-1]
            print("decode B=%d L=%-7d dense %s us cudnn %s us TS reselect %s us hit %s us" % (
                B, L, fmt(r.get("ours_dense"), "us", "%.1f"), fmt(r.get("cudnn"), "us", "%.1f"),
                fmt(r.get("ts_reselect"), "us", "%.1f"), fmt(r.get("ts_hit"), "us", "%.1f")),
                flush=True)
    for L in parse_ints(args.prefill_lengths):
        prefill.append(bench_step(1, args.prefill_rows, L, args, ts, gen, rng))
        r = prefill[-1]
        print("prefill rows=%d L=%-7d dense %s us cudnn %s us TS reselect %s us hit %s us" % (
            args.prefill_rows, L, fmt(r.get("ours_dense"), "us", "%.1f"),
            fmt(r.get("cudnn"), "us", "%.1f"), fmt(r.get("ts_reselect"), "us", "%.1f"),
            fmt(r.get("ts_hit"), "us", "%.1f")), flush=True)
    if ts is not None:
        ts.ops.close()
    print_table(info, read_gbs, decode, prefill, sanity_result)
    elapsed = time.time() - t_start
    log("tokenselect_bench: %.1f s" % elapsed)
    gpu_common.write_json(args.out, {
        "script": "tokenselect_bench", "device": info, "lib": args.lib, "args": vars(args),
        "read_gbs": read_gbs, "sanity": sanity_result, "decode": decode, "prefill": prefill,
        "seconds": round(elapsed, 1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
