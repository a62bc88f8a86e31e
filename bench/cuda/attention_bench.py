#!/usr/bin/env python3
"""Times sparseserve's CUDA attention against PyTorch SDPA on the same inputs, in one process.

What it measures, in order:
  1. the device's copy bandwidth (a 1 GiB device-to-device copy, bytes read + written, median)
     and bf16 GEMM 8192^3 TFLOP/s: the ceilings the other figures are read against;
  2. prefill attention, batch 1, causal, q_len = kv_len = S (--prefill-lengths, default 8K, 32K,
     128K), 32 query heads / 8 KV heads, head_dim 128: ours (ss_attention over a paged KV of
     64-token blocks with a shuffled block table) against torch.nn.functional.
     scaled_dot_product_attention forced to the cuDNN backend and to the flash backend. Reported:
     ms, TFLOP/s with causal FLOPs = 4*S*S*heads*head_dim/2, and ours/cuDNN;
  3. decode attention, q_len 1, batch 1 and 8, kv_len 32K and 128K: ours against SDPA cuDNN,
     flash and (where its memory is small) math. Reported: microseconds and the GB/s of the GQA
     KV bytes (kv_len*kv_heads*head_dim*2 bytes*2 for K and V, per sequence) as % of the copy
     bandwidth, and as % of the read bandwidth (a large sum: reads alone beat a copy, so a
     read-only kernel can pass 100% of the copy figure).

Both sides read the same bf16 values: K/V are drawn once in SDPA's [B, kv_heads, S, hd] layout
and scattered into our paged pool. SDPA gets GQA through enable_gqa=True where the backend
accepts it, else K/V repeated per query head ("repeat_kv", which reads 4x the bytes); the mode is
printed. A backend that refuses prints its reason. Decode uses is_causal=False for SDPA (its
causal mask is top-left aligned, wrong for q_len 1; one query row sees every key anyway).
Timing: CUDA events around a loop on the default stream (the one our library uses), warm-up
first, median of several samples; few samples for the 128K cases. Without --lib only the PyTorch
side runs. Our output is compared with SDPA's (rel error) as a sanity check of the same inputs.
"""

import argparse
import math
import random
import sys
import time
import warnings

import torch
import torch.nn.functional as F

import gpu_common
from gpu_common import log

BF16 = torch.bfloat16


def parse_ints(text):
    return [int(float(x)) for x in text.split(",") if x.strip()]


def rel_error(a, b, rows=4096):
    """||a - b|| / ||b|| over the first dimension in chunks (float32 math, float64 sums)."""
    num = den = 0.0
    for i in range(0, a.shape[0], rows):
        x, y = a[i:i + rows].float(), b[i:i + rows].float()
        num += float(torch.sum((x - y) ** 2, dtype=torch.float64))
        den += float(torch.sum(y ** 2, dtype=torch.float64))
    return math.sqrt(num) / math.sqrt(den) if den > 0 else math.sqrt(num)


def build_pool(k, v, block_tokens, rng):
    """Scatters K/V [B, kv_heads, L, hd] into a paged pool [num_blocks*2, block_tokens, kv_heads,
    hd] (keys of block b in row 2b, values in 2b+1) with a shuffled block table per sequence."""
    B, kvh, L, hd = k.shape
    nb = (L + block_tokens - 1) // block_tokens
    num_blocks = B * nb + 1  # one spare block that no table names
    perm = list(range(num_blocks))
    rng.shuffle(perm)
    pool = torch.zeros(num_blocks * 2, block_tokens, kvh, hd, dtype=BF16, device="cuda")
    p5 = pool.view(num_blocks, 2, block_tokens, kvh, hd)
    tables = []
    for b in range(B):
        table = perm[b * nb:(b + 1) * nb]
        tables.append(table)
        idx = torch.tensor(table, dtype=torch.long, device="cuda")
        for j, src in ((0, k[b]), (1, v[b])):
            x = src.transpose(0, 1)  # [L, kv_heads, hd]
            if nb * block_tokens != L:
                pad = torch.zeros(nb * block_tokens - L, kvh, hd, dtype=BF16, device="cuda")
                x = torch.cat([x, pad])
            p5[idx, j] = x.reshape(nb, block_tokens, kvh, hd)
    return pool, tables


def sdpa_backends():
    from torch.nn.attention import SDPBackend
    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "math": SDPBackend.MATH}


def try_sdpa(backend_name, q, k, v, causal):
    """Finds a way the backend runs: enable_gqa, else repeat_kv. Returns (fn, mode, out, None)
    or (None, None, None, reason). fn must be called inside sdpa_kernel(backend)."""
    from torch.nn.attention import sdpa_kernel
    backend = sdpa_backends()[backend_name]
    ratio = q.shape[1] // k.shape[1]
    modes = ["mha"] if ratio == 1 else ["enable_gqa", "repeat_kv"]
    reasons = []
    for mode in modes:
        if mode == "repeat_kv":
            kk = k.repeat_interleave(ratio, dim=1)
            vv = v.repeat_interleave(ratio, dim=1)
            kw = {}
        else:
            kk, vv = k, v
            kw = {"enable_gqa": True} if mode == "enable_gqa" else {}

        def fn(kk=kk, vv=vv, kw=kw):
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, **kw)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with sdpa_kernel([backend]):
                    out = fn()
                torch.cuda.synchronize()
            return fn, mode, out, None
        except (RuntimeError, TypeError, ValueError) as e:
            why = [str(w.message).strip().splitlines()[0] for w in caught][:3]
            reasons.append("%s: %s%s" % (mode, str(e).strip().splitlines()[0][:160],
                                         (" (" + "; ".join(why)[:300] + ")") if why else ""))
            del kk, vv
            torch.cuda.empty_cache()
    return None, None, None, " | ".join(reasons)


def time_sdpa(backend_name, fn, **kw):
    from torch.nn.attention import sdpa_kernel
    with sdpa_kernel([sdpa_backends()[backend_name]]):
        return gpu_common.time_cuda(fn, **kw)


class Cycle:
    """Calls its functions in turn (rotating input copies past the L2 cache)."""

    def __init__(self, fns):
        self.fns, self.i = list(fns), 0

    def __call__(self):
        f = self.fns[self.i]
        self.i = (self.i + 1) % len(self.fns)
        return f()


def bench_prefill(S, args, ops, gen, rng):
    H, KVH, D, bt = args.heads, args.kv_heads, args.head_dim, args.block_tokens
    row = {"S": S, "heads": H, "kv_heads": KVH, "head_dim": D, "block_tokens": bt,
           "flops": 4.0 * S * S * H * D / 2}
    q_packed = torch.randn(S, H, D, dtype=BF16, device="cuda", generator=gen)
    k = torch.randn(1, KVH, S, D, dtype=BF16, device="cuda", generator=gen)
    v = torch.randn(1, KVH, S, D, dtype=BF16, device="cuda", generator=gen)
    q_sdpa = q_packed.view(1, S, H, D).transpose(1, 2).contiguous()  # [1, H, S, D]
    timing = dict(warmup=1, reps=args.reps, target_ms=0.0, max_total_s=args.max_s)
    ref_out = None
    for name in ("cudnn", "flash"):
        log("prefill S=%d: SDPA %s" % (S, name))
        fn, mode, out, why = try_sdpa(name, q_sdpa, k, v, causal=True)
        if fn is None:
            row[name] = {"refused": why}
            log("  refused: %s" % why)
            continue
        t = time_sdpa(name, fn, **timing)
        row[name] = {"mode": mode, "ms": t["median_ms"], "samples_ms": t["samples_ms"],
                     "tflops": row["flops"] / (t["median_ms"] * 1e-3) / 1e12}
        if ref_out is None:
            ref_out, row["ref_backend"] = out.transpose(1, 2)[0], name  # [S, H, D]
        else:
            del out
        del fn
        torch.cuda.empty_cache()
    if ops is not None:
        log("prefill S=%d: ours" % S)
        pool, tables = build_pool(k, v, bt, rng)
        out = torch.full_like(q_packed, float("nan"))
        run = ops.prepare_attention(q_packed, pool, bt, [S], [S], tables[0], 0.0, out)
        try:
            t = gpu_common.time_cuda(run, **timing)
            ops.sync()
            row["ours"] = {"ms": t["median_ms"], "samples_ms": t["samples_ms"],
                           "tflops": row["flops"] / (t["median_ms"] * 1e-3) / 1e12}
            if ref_out is not None:
                row["ours"]["rel_vs_" + row["ref_backend"]] = rel_error(out, ref_out)
            if "ms" in row.get("cudnn", {}):
                row["ours_over_cudnn"] = t["median_ms"] / row["cudnn"]["ms"]
        except Exception as e:
            row["ours"] = {"error": str(e)}
            log("  ours failed: %s" % e)
        del pool, out, run
    del q_packed, k, v, q_sdpa, ref_out
    torch.cuda.empty_cache()
    return row


def bench_decode(B, L, args, ops, gen, rng, copy_gbs, read_gbs):
    H, KVH, D, bt = args.heads, args.kv_heads, args.head_dim, args.block_tokens
    kv_bytes = B * L * KVH * D * 2 * 2
    row = {"batch": B, "kv_len": L, "heads": H, "kv_heads": KVH, "head_dim": D,
           "block_tokens": bt, "kv_bytes": kv_bytes}
    l2 = gpu_common.l2_bytes()
    copies = 1 if kv_bytes >= 2 * l2 else min(16, int(math.ceil(4.0 * l2 / kv_bytes)))
    row["input_copies"] = copies
    sets = []
    for _ in range(copies):
        q_packed = torch.randn(B, H, D, dtype=BF16, device="cuda", generator=gen)
        k = torch.randn(B, KVH, L, D, dtype=BF16, device="cuda", generator=gen)
        v = torch.randn(B, KVH, L, D, dtype=BF16, device="cuda", generator=gen)
        sets.append({"q": q_packed, "k": k, "v": v,
                     "q_sdpa": q_packed.view(B, 1, H, D).transpose(1, 2).contiguous()})
    timing = dict(warmup=2, reps=args.reps, target_ms=20.0, max_total_s=args.max_s)

    def fill(entry, ms):
        entry["us"] = ms * 1e3
        entry["gbs"] = kv_bytes / (ms * 1e-3) / 1e9
        entry["pct_copy_bw"] = 100.0 * entry["gbs"] / copy_gbs if copy_gbs else None
        entry["pct_read_bw"] = 100.0 * entry["gbs"] / read_gbs if read_gbs else None

    ref_out = None
    for name in ("cudnn", "flash", "math"):
        repeated = B * L * H * D * 2 * 2
        if name == "math" and repeated > args.math_max_gib * 2**30:
            row[name] = {"skipped": "K/V repeated per head would be %.1f GiB > --math-max-gib"
                         % (repeated / 2**30)}
            continue
        log("decode B=%d L=%d: SDPA %s" % (B, L, name))
        fns, mode, why = [], None, None
        for s in sets:
            fn, mode, out, why = try_sdpa(name, s["q_sdpa"], s["k"], s["v"], causal=False)
            if fn is None:
                break
            fns.append(fn)
            if ref_out is None:
                ref_out, row["ref_backend"] = out[:, :, 0], name  # [B, H, D] of sets[0]
        if why is not None:
            row[name] = {"refused": why}
            log("  refused: %s" % why)
            del fns
            torch.cuda.empty_cache()
            continue
        t = time_sdpa(name, Cycle(fns), **timing)
        row[name] = {"mode": mode, "samples_us": [round(x * 1e3, 2) for x in t["samples_ms"]]}
        fill(row[name], t["median_ms"])
        del fns
        torch.cuda.empty_cache()
    if ops is not None:
        log("decode B=%d L=%d: ours" % (B, L))
        runs, keep = [], []
        for s in sets:
            pool, tables = build_pool(s["k"], s["v"], bt, rng)
            out = torch.full_like(s["q"], float("nan"))
            flat = [b for t in tables for b in t]
            runs.append(ops.prepare_attention(s["q"], pool, bt, [1] * B, [L] * B, flat, 0.0,
                                              out))
            keep.append((pool, out))
        try:
            t = gpu_common.time_cuda(Cycle(runs), **timing)
            ops.sync()
            row["ours"] = {"samples_us": [round(x * 1e3, 2) for x in t["samples_ms"]]}
            fill(row["ours"], t["median_ms"])
            if ref_out is not None:
                row["ours"]["rel_vs_" + row["ref_backend"]] = rel_error(keep[0][1], ref_out)
            if "us" in row.get("cudnn", {}):
                row["ours_over_cudnn"] = row["ours"]["us"] / row["cudnn"]["us"]
        except Exception as e:
            row["ours"] = {"error": str(e)}
            log("  ours failed: %s" % e)
        del runs, keep
    del sets, ref_out
    torch.cuda.empty_cache()
    return row


def fmt(entry, key, spec):
    if not isinstance(entry, dict):
        return "-"
    if key in entry and entry[key] is not None:
        return spec % entry[key]
    if "refused" in entry:
        return "refused"
    if "skipped" in entry:
        return "skipped"
    if "error" in entry:
        return "error"
    return "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--lib", help="libsparseserve_cuda_ops.so (omit: time PyTorch only)")
    ap.add_argument("--prefill-lengths", default="8192,32768,131072")
    ap.add_argument("--decode-lengths", default="32768,131072")
    ap.add_argument("--decode-batches", default="1,8")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=7, help="samples per measurement at most")
    ap.add_argument("--max-s", type=float, default=3.0,
                    help="rough time budget per measurement in seconds (cuts samples)")
    ap.add_argument("--math-max-gib", type=float, default=2.0,
                    help="skip the math backend when repeated K/V would exceed this")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="write all results as JSON here")
    args = ap.parse_args()

    gpu_common.require_cuda()
    info = gpu_common.device_info()
    ops = None
    if args.lib:
        from kernel_check import CudaOps
        ops = CudaOps(args.lib)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    rng = random.Random(args.seed)
    t_start = time.time()
    print("attention_bench: device=%s torch=%s cuda=%s lib=%s" % (
        info["name"], info["torch"], info["cuda"], args.lib), flush=True)

    log("copy bandwidth ...")
    copy_gbs, _ = gpu_common.copy_bandwidth_gbs()
    read_gbs, _ = gpu_common.read_bandwidth_gbs()
    log("bf16 GEMM 8192^3 ...")
    gemm, _ = gpu_common.gemm_tflops()
    print("copy bandwidth %.0f GB/s (read+write), read bandwidth %.0f GB/s, bf16 GEMM 8192^3 "
          "%.0f TFLOP/s" % (copy_gbs, read_gbs, gemm), flush=True)

    prefill, decode = [], []
    for S in parse_ints(args.prefill_lengths):
        prefill.append(bench_prefill(S, args, ops, gen, rng))
        r = prefill[-1]
        print("prefill S=%-6d ours %s ms  cudnn %s ms  flash %s ms" % (
            S, fmt(r.get("ours"), "ms", "%.3f"), fmt(r.get("cudnn"), "ms", "%.3f"),
            fmt(r.get("flash"), "ms", "%.3f")), flush=True)
    for B in parse_ints(args.decode_batches):
        for L in parse_ints(args.decode_lengths):
            decode.append(bench_decode(B, L, args, ops, gen, rng, copy_gbs, read_gbs))
            r = decode[-1]
            print("decode B=%d L=%-6d ours %s us  cudnn %s us  flash %s us  math %s us" % (
                B, L, fmt(r.get("ours"), "us", "%.1f"), fmt(r.get("cudnn"), "us", "%.1f"),
                fmt(r.get("flash"), "us", "%.1f"), fmt(r.get("math"), "us", "%.1f")),
                flush=True)
    if ops is not None:
        ops.close()

    print()
    print("== %s, torch %s; copy %.0f GB/s, read %.0f GB/s, GEMM %.0f TFLOP/s; H=%d KVH=%d "
          "hd=%d bt=%d ==" % (info["name"], info["torch"], copy_gbs, read_gbs, gemm, args.heads,
                              args.kv_heads, args.head_dim, args.block_tokens))
    print("prefill (causal, batch 1)   ms: ours / cudnn / flash      TFLOP/s: ours / cudnn / "
          "flash   ours/cudnn  rel(ours,ref)  sdpa GQA mode")
    for r in prefill:
        o, c, f = r.get("ours"), r.get("cudnn"), r.get("flash")
        rel = next((v for k, v in (o or {}).items() if k.startswith("rel_vs_")), None)
        print("  S=%-7d %9s %9s %9s   %7s %7s %7s   %8s   %11s   %s" % (
            r["S"], fmt(o, "ms", "%.3f"), fmt(c, "ms", "%.3f"), fmt(f, "ms", "%.3f"),
            fmt(o, "tflops", "%.0f"), fmt(c, "tflops", "%.0f"), fmt(f, "tflops", "%.0f"),
            ("%.2f" % r["ours_over_cudnn"]) if "ours_over_cudnn" in r else "-",
            ("%.2e" % rel) if rel is not None else "-",
            "/".join("%s:%s" % (n, (r.get(n) or {}).get("mode", "-")) for n in ("cudnn", "flash"))))
    print("decode (q_len 1)            us: ours / cudnn / flash / math   % of copy BW: ours / "
          "cudnn / flash   % of read BW: ours / cudnn   ours/cudnn  rel(ours,ref)")
    for r in decode:
        o, c, f, m = r.get("ours"), r.get("cudnn"), r.get("flash"), r.get("math")
        rel = next((v for k, v in (o or {}).items() if k.startswith("rel_vs_")), None)
        print("  B=%d L=%-7d %8s %8s %8s %8s   %5s %5s %5s   %5s %5s   %8s   %11s" % (
            r["batch"], r["kv_len"], fmt(o, "us", "%.1f"), fmt(c, "us", "%.1f"),
            fmt(f, "us", "%.1f"), fmt(m, "us", "%.1f"), fmt(o, "pct_copy_bw", "%.0f"),
            fmt(c, "pct_copy_bw", "%.0f"), fmt(f, "pct_copy_bw", "%.0f"),
            fmt(o, "pct_read_bw", "%.0f"), fmt(c, "pct_read_bw", "%.0f"),
            ("%.2f" % r["ours_over_cudnn"]) if "ours_over_cudnn" in r else "-",
            ("%.2e" % rel) if rel is not None else "-"))
    elapsed = time.time() - t_start
    log("attention_bench: %.1f s" % elapsed)
    gpu_common.write_json(args.out, {
        "script": "attention_bench", "device": info, "lib": args.lib, "args": vars(args),
        "copy_gbs": copy_gbs, "read_gbs": read_gbs, "gemm_tflops": gemm, "prefill": prefill, "decode": decode,
        "seconds": round(elapsed, 1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
