"""Shared helpers for the CUDA check and benchmark scripts in bench/cuda/.

Holds what kernel_check.py, attention_bench.py and transformers_peer.py have in common:
progress logging to stderr, CUDA-event timing with a median over repetitions, the device's
measured copy bandwidth and bf16 GEMM throughput, a device description, and JSON output.
Everything here is plain PyTorch; nothing loads the sparseserve library.
"""

import json
import math
import os
import statistics
import sys
import time

import torch


def log(*parts):
    """Progress message on stderr, flushed at once (stdout holds the results)."""
    print(*parts, file=sys.stderr, flush=True)


def require_cuda():
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device visible to PyTorch (torch %s)" % torch.__version__)
    # Our library queues its work on the legacy default stream; PyTorch's default stream is that
    # same stream, and every script here keeps to it so that order and timing are shared.
    torch.cuda.init()
    stream = torch.cuda.current_stream()
    if stream.cuda_stream != 0:
        log("warning: PyTorch's current stream is not the legacy default stream (%#x)"
            % stream.cuda_stream)


def disable_tf32():
    """f32 references must be real f32 products, not TF32 ones."""
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    except Exception:  # pragma: no cover - attribute renamed in some future torch
        pass


def device_info():
    props = torch.cuda.get_device_properties(0)
    info = {
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "total_memory_gib": round(props.total_memory / 2**30, 1),
        "capability": "%d.%d" % (props.major, props.minor),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": time.strftime("%Y-%m-%d"),
    }
    l2 = getattr(props, "L2_cache_size", None)
    if l2:
        info["l2_bytes"] = int(l2)
    return info


def l2_bytes():
    props = torch.cuda.get_device_properties(0)
    return int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)


def time_cuda(fn, *, warmup=1, reps=7, target_ms=20.0, max_total_s=10.0, min_reps=2):
    """Times fn() on the current (default) stream with CUDA events.

    After `warmup` calls, one call is timed alone to size the rest: each sample is a loop of
    `inner` back-to-back calls (enough to last about target_ms, so event overhead and launch
    jitter vanish for microsecond kernels), and the number of samples is cut so that the whole
    measurement stays near max_total_s (never below min_reps samples, the first timed call
    included). Returns a dict: median_ms and min_ms per call, samples_ms, inner.
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    first_ms = start.elapsed_time(end)
    inner = max(1, min(1000, int(math.ceil(target_ms / max(first_ms, 1e-3)))))
    budget_reps = int(max_total_s * 1000.0 / max(first_ms * inner, 1e-3))
    n = max(min_reps - 1, min(reps - 1, budget_reps))
    samples = [first_ms] if inner == 1 else []
    if inner > 1:
        n = max(n, 1)
    for _ in range(n):
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / inner)
    return {
        "median_ms": statistics.median(samples),
        "min_ms": min(samples),
        "samples_ms": [round(s, 6) for s in samples],
        "inner": inner,
    }


def copy_bandwidth_gbs(nbytes=1 << 30, reps=10):
    """Device-to-device copy bandwidth in GB/s (1e9 B/s), counting bytes read plus written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    t = time_cuda(lambda: dst.copy_(src), warmup=2, reps=reps, target_ms=0.0, max_total_s=5.0,
                  min_reps=5)
    del src, dst
    torch.cuda.empty_cache()
    return 2.0 * nbytes / (t["median_ms"] * 1e-3) / 1e9, t


def read_bandwidth_gbs(nbytes=1 << 30, reps=10):
    """Device read bandwidth in GB/s: a sum over a large f32 buffer (bytes read only). A pure
    read stream runs faster than a copy, so memory-bound kernels that only read (decode
    attention) can pass 100% of the copy figure; this one is their tighter ceiling."""
    x = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
    t = time_cuda(lambda: x.sum(), warmup=2, reps=reps, target_ms=0.0, max_total_s=5.0,
                  min_reps=5)
    del x
    torch.cuda.empty_cache()
    return nbytes / (t["median_ms"] * 1e-3) / 1e9, t


def gemm_tflops(n=8192, reps=10):
    """bf16 n x n x n matrix product on random data, TFLOP/s (median)."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    t = time_cuda(lambda: torch.matmul(a, b, out=c), warmup=3, reps=reps, target_ms=10.0,
                  max_total_s=5.0, min_reps=5)
    del a, b, c
    torch.cuda.empty_cache()
    return 2.0 * n**3 / (t["median_ms"] * 1e-3) / 1e12, t


def write_json(path, obj):
    if not path:
        return
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False, default=str)
        f.write("\n")
    log("wrote %s" % path)
