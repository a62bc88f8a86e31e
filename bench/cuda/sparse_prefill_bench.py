#!/usr/bin/env python3
"""Times sparseserve's MInference sparse prefill attention against dense attention, per layer.

For each length S (--lengths, default 32K and 128K), batch 1, causal, q_len = kv_len = S,
32 query heads / 8 KV heads, head_dim 128, a paged KV of 64-token blocks with a shuffled block
table, every contender on the same inputs and in one process:
  * torch SDPA on cuDNN (dense): the rate the sparse kernels are held to (issue 16: each sparse
    variant does its work at >= 80% of cuDNN's dense FLOP rate);
  * ours dense (ss_attention with dense chunks kept on our kernel, SPARSESERVE_PREFILL_ATTENTION=
    kernel, set here before the library loads);
  * ours sparse (ss_minference_attention) for each pattern of --patterns: A-shape, vertical-slash,
    block-sparse with sizes every head shares, and `planted` (issue 16's planted index, every head
    VS(1000, 6096) from seeded lines). Each is timed with its index built per call (the layer as
    the product runs it) and with the index reused (the attention kernels alone).
With --minference-repo DIR (bench/cuda/fetch_minference_peer.sh puts MInference's files there),
MInference's own pipeline runs on the planted index's very lines (ss_minference_planted_lines): its
CUDA index converter (built here with torch's cpp_extension) and its Triton vertical-slash kernel,
on the same Q and on K/V repeated per query head (its kernel takes no GQA), timed with the index
conversion and without; its output is compared with ours.
Reported per case: ms, density (pairs computed / causal pairs, from the kernels' own counters),
useful TFLOP/s = 4 * pairs * head_dim / time (causal dense: 4 * S*(S+1)/2 * heads * head_dim),
and that rate over cuDNN's dense one. A head whose index covers more than 60% of its causal pairs
runs on the dense kernel (kernels/minference_index.h), which the density shows: on random inputs
the estimated lines spread, so vertical-slash sizes that a trained model keeps sparse (1000, 2048)
cover everything; the default vs:300:100 stays sparse.
"""

import argparse
import os
import random
import sys
import time

import torch

import gpu_common
from gpu_common import log

BF16 = torch.bfloat16
PATTERNS = {"ashape": 0, "vs": 1, "bs": 2, "dense": 3}


def parse_patterns(text):
    """'ashape:128:3968,vs:1000:2048,bs:100,planted' -> [(name, kind, v, s, planted)]."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if item == "planted":
            out.append(("planted", 1, 1000, 6096, True))
            continue
        parts = item.split(":")
        kind = PATTERNS[parts[0]]
        v = int(parts[1]) if len(parts) > 1 else 0
        s = int(parts[2]) if len(parts) > 2 else 0
        out.append((item, kind, v, s, False))
    return out


def load_minference(repo):
    """MInference's index converter (built with cpp_extension) and its Triton kernel module,
    loaded from its files under `repo` behind a stand-in package (its module imports
    `..cuda.convert_vertical_slash_indexes`)."""
    import importlib.util
    import types
    from torch.utils.cpp_extension import load
    ext = load(name="minference_vs_index",
               sources=[os.path.join(repo, "csrc", "kernels.cpp"),
                        os.path.join(repo, "csrc", "vertical_slash_index.cu")],
               extra_cuda_cflags=["-O3"], verbose=False)
    pkg = types.ModuleType("minference")
    pkg.__path__ = []
    ops_pkg = types.ModuleType("minference.ops")
    ops_pkg.__path__ = []
    cuda = types.ModuleType("minference.cuda")
    cuda.convert_vertical_slash_indexes = ext.convert_vertical_slash_indexes
    sys.modules.update({"minference": pkg, "minference.ops": ops_pkg, "minference.cuda": cuda})
    name = "minference.ops.pit_sparse_flash_attention_v2"
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(repo, "minference", "ops", "pit_sparse_flash_attention_v2.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return ext, mod


def planted_lines(ops, heads, kv_len):
    """Every head's planted columns and slash offsets (layer 0), as [1, heads, n] int32 tensors."""
    import ctypes
    cols = (ctypes.c_int32 * 1000)()
    slashes = (ctypes.c_int32 * 6096)()
    nc, ns = ctypes.c_int32(), ctypes.c_int32()
    fn = ops.lib.ss_minference_planted_lines
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int32),
                   ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
                   ctypes.POINTER(ctypes.c_int32)]
    fn.restype = ctypes.c_int
    v_rows, s_rows = [], []
    for h in range(heads):
        if fn(0, h, kv_len, cols, ctypes.byref(nc), slashes, ctypes.byref(ns)) != 0:
            raise RuntimeError("ss_minference_planted_lines: %s" % ops.last_error())
        v_rows.append(list(cols[:nc.value]))
        s_rows.append(list(slashes[:ns.value]))
    to = dict(dtype=torch.int32, device="cuda")
    return torch.tensor([v_rows], **to), torch.tensor([s_rows], **to)


def bench_minference_peer(S, args, peer, ops, q, k, v, ours_planted, timing):
    """MInference's own pipeline on the planted lines (see the module doc)."""
    from attention_bench import rel_error
    ext, mod = peer
    H, KVH, D = args.heads, args.kv_heads, args.head_dim
    q_m = q.view(1, S, H, D).transpose(1, 2).contiguous()
    k_m = k.repeat_interleave(H // KVH, dim=1).contiguous()
    v_m = v.repeat_interleave(H // KVH, dim=1).contiguous()
    v_idx, s_idx = planted_lines(ops, H, S)
    seqlens = torch.tensor([S], dtype=torch.int32, device="cuda")
    sm_scale = D ** -0.5

    def with_index():
        return mod.vertical_slash_sparse_attention(q_m, k_m, v_m, v_idx, s_idx)
    vs = v_idx.sort(dim=-1)[0]
    ss = s_idx.sort(dim=-1, descending=True)[0]
    bc, bo, cc, ci = ext.convert_vertical_slash_indexes(seqlens, vs, ss, S, 64, 64)

    def attention_only():
        return mod._triton_mixed_sparse_attention(q_m, k_m, v_m, seqlens, bc, bo, cc, ci,
                                                  sm_scale, 64, 64)
    out = {}
    for label, fn in (("with_index", with_index), ("attention_only", attention_only)):
        t = gpu_common.time_cuda(fn, **timing)
        out[label] = {"ms": t["median_ms"]}
    o = with_index().transpose(1, 2)[0]  # [S, H, D]
    if ours_planted is not None:
        out["rel_vs_ours"] = rel_error(o, ours_planted)
    del q_m, k_m, v_m, o
    torch.cuda.empty_cache()
    return out


def bench_length(S, args, ops, gen, rng, peer):
    from attention_bench import build_pool, rel_error, time_sdpa, try_sdpa
    H, KVH, D, bt = args.heads, args.kv_heads, args.head_dim, args.block_tokens
    causal_pairs = S * (S + 1) / 2 * H
    dense_flops = 4.0 * causal_pairs * D
    row = {"S": S, "heads": H, "kv_heads": KVH, "head_dim": D, "block_tokens": bt, "cases": {}}
    q = torch.randn(S, H, D, dtype=BF16, device="cuda", generator=gen)
    k = torch.randn(1, KVH, S, D, dtype=BF16, device="cuda", generator=gen)
    v = torch.randn(1, KVH, S, D, dtype=BF16, device="cuda", generator=gen)
    timing = dict(warmup=1, reps=args.reps, target_ms=0.0, max_total_s=args.max_s)

    log("S=%d: SDPA cuDNN" % S)
    q_sdpa = q.view(1, S, H, D).transpose(1, 2).contiguous()
    fn, mode, ref, why = try_sdpa("cudnn", q_sdpa, k, v, causal=True)
    if fn is None:
        row["cudnn"] = {"refused": why}
        ref = None
    else:
        t = time_sdpa("cudnn", fn, **timing)
        row["cudnn"] = {"mode": mode, "ms": t["median_ms"],
                        "tflops": dense_flops / (t["median_ms"] * 1e-3) / 1e12}
        ref = ref.transpose(1, 2)[0]
    del q_sdpa, fn
    torch.cuda.empty_cache()

    pool, tables = build_pool(k, v, bt, rng)
    if peer is None:
        del k, v
    out = torch.full_like(q, float("nan"))
    ours_planted = None
    log("S=%d: ours dense" % S)
    run = ops.prepare_attention(q, pool, bt, [S], [S], tables[0], 0.0, out)
    t = gpu_common.time_cuda(run, **timing)
    ops.sync()
    row["ours_dense"] = {"ms": t["median_ms"],
                         "tflops": dense_flops / (t["median_ms"] * 1e-3) / 1e12}
    if ref is not None:
        row["ours_dense"]["rel_vs_cudnn"] = rel_error(out, ref)
    del run

    for name, kind, pv, ps, planted in parse_patterns(args.patterns):
        log("S=%d: ours MInference %s" % (S, name))
        case = {}
        try:
            build = ops.prepare_minference(q, pool, bt, [S], [S], tables[0], 0.0, kind, pv, ps,
                                           planted, True, out)
            build()  # plans, builds the index once: the counters hold one call's pairs
            ops.sync()
            pairs, causal = ops.minference_stats(1)[0]
            case["density"] = pairs / causal if causal > 0 else None
            reuse = ops.prepare_minference(q, pool, bt, [S], [S], tables[0], 0.0, kind, pv, ps,
                                           planted, False, out)
            for label, fn in (("with_index", build), ("attention_only", reuse)):
                t = gpu_common.time_cuda(fn, **timing)
                ops.sync()
                useful = 4.0 * pairs * D
                case[label] = {"ms": t["median_ms"],
                               "useful_tflops": useful / (t["median_ms"] * 1e-3) / 1e12}
                if "tflops" in row["cudnn"]:
                    case[label]["over_cudnn_rate"] = (case[label]["useful_tflops"] /
                                                      row["cudnn"]["tflops"])
                    case[label]["speedup_vs_cudnn"] = row["cudnn"]["ms"] / t["median_ms"]
            if planted:
                build()
                ours_planted = out.clone()
            del build, reuse
        except Exception as e:  # noqa: BLE001 - report and go on to the next case
            case["error"] = str(e)
            log("  failed: %s" % e)
        row["cases"][name] = case
    if peer is not None:
        log("S=%d: MInference's own kernels (planted lines)" % S)
        try:
            row["minference_peer"] = bench_minference_peer(S, args, peer, ops, q, k, v,
                                                           ours_planted, timing)
        except Exception as e:  # noqa: BLE001
            row["minference_peer"] = {"error": str(e)}
            log("  failed: %s" % e)
        del k, v
    del pool, out, q, ref, ours_planted
    torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--lib", required=True, help="libsparseserve_cuda_ops.so")
    ap.add_argument("--lengths", default="32768,131072")
    ap.add_argument("--patterns", default="ashape:128:3968,vs:300:100,bs:100,planted",
                    help="comma list: ashape:SINKS:WINDOW, vs:COLUMNS:SLASHES, bs:BLOCKS, "
                         "dense, planted")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-s", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minference-repo",
                    help="MInference's files (bench/cuda/fetch_minference_peer.sh): run its "
                         "kernels on the planted lines too")
    ap.add_argument("--out", help="write all results as JSON here")
    args = ap.parse_args()

    # Dense chunks on our kernel (read once by the library, so before it loads).
    os.environ.setdefault("SPARSESERVE_PREFILL_ATTENTION", "kernel")
    gpu_common.require_cuda()
    info = gpu_common.device_info()
    from kernel_check import CudaOps
    ops = CudaOps(args.lib)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    rng = random.Random(args.seed)
    t0 = time.time()
    peer = None
    if args.minference_repo:
        log("building MInference's index converter ...")
        peer = load_minference(args.minference_repo)
    rows = [bench_length(int(float(x)), args, ops, gen, rng, peer)
            for x in args.lengths.split(",") if x.strip()]
    ops.close()

    print()
    print("== %s; H=%d KVH=%d hd=%d bt=%d; SPARSESERVE_PREFILL_WS=%s ==" % (
        info["name"], args.heads, args.kv_heads, args.head_dim, args.block_tokens,
        os.environ.get("SPARSESERVE_PREFILL_WS", "(default)")))
    for r in rows:
        c, d = r["cudnn"], r["ours_dense"]
        print("S=%-7d cuDNN dense %s ms (%s TFLOP/s)   ours dense %.3f ms (%.0f TFLOP/s, %s of "
              "cuDNN's rate)" % (
                  r["S"], "%.3f" % c["ms"] if "ms" in c else "-",
                  "%.0f" % c["tflops"] if "tflops" in c else "-", d["ms"], d["tflops"],
                  "%.2f" % (d["tflops"] / c["tflops"]) if "tflops" in c else "-"))
        print("  %-22s %8s   %10s %8s %6s %7s   %10s %8s %6s" % (
            "pattern", "density", "idx+attn ms", "TFLOP/s", "xrate", "xcuDNN",
            "attn ms", "TFLOP/s", "xrate"))
        for name, case in r["cases"].items():
            if "error" in case:
                print("  %-22s error: %s" % (name, case["error"][:100]))
                continue
            w, a = case["with_index"], case["attention_only"]
            print("  %-22s %7.1f%%   %10.3f %8.0f %6s %7s   %10.3f %8.0f %6s" % (
                name, 100.0 * case["density"], w["ms"], w["useful_tflops"],
                "%.2f" % w["over_cudnn_rate"] if "over_cudnn_rate" in w else "-",
                "%.2fx" % w["speedup_vs_cudnn"] if "speedup_vs_cudnn" in w else "-",
                a["ms"], a["useful_tflops"],
                "%.2f" % a["over_cudnn_rate"] if "over_cudnn_rate" in a else "-"))
        m = r.get("minference_peer")
        if m is not None and "error" not in m:
            ours = r["cases"].get("planted", {})
            w, a = ours.get("with_index", {}), ours.get("attention_only", {})
            print("  MInference's own (planted lines): %.3f ms with its index, %.3f ms attention "
                  "alone; ours/theirs time %s / %s; rel(theirs, ours) %s" % (
                      m["with_index"]["ms"], m["attention_only"]["ms"],
                      "%.2f" % (w["ms"] / m["with_index"]["ms"]) if "ms" in w else "-",
                      "%.2f" % (a["ms"] / m["attention_only"]["ms"]) if "ms" in a else "-",
                      "%.2e" % m["rel_vs_ours"] if "rel_vs_ours" in m else "-"))
        elif m is not None:
            print("  MInference's own: error %s" % m["error"][:200])
    log("sparse_prefill_bench: %.1f s" % (time.time() - t0))
    gpu_common.write_json(args.out, {"script": "sparse_prefill_bench", "device": info,
                                     "args": vars(args), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
