#!/usr/bin/env python3
"""End-to-end peer: Hugging Face transformers' Llama on the synthetic Llama-3-8B shape, on the GPU.

Builds LlamaForCausalLM from a LlamaConfig with the real Llama-3-8B shape (hidden 4096, 32
layers, 32 heads, 8 KV heads, head_dim 128, FFN 14336, vocab 128256, untied embeddings, RoPE theta
500000 with llama3 scaling factor 8, 131072 positions), random init, bf16, built directly on the
GPU, attention through PyTorch SDPA (attn_implementation="sdpa"). Weights are random, so only
speed means anything; the shapes, dtypes and kernels are those of the real model.

Measured (CUDA events on the default stream, warm-up first, median of a few):
  * prefill: one forward of S random tokens (--prefill-lengths, default 4096,8192), batch 1,
    use_cache=True, logits_to_keep=1 -> ms and tokens/s;
  * decode, batch 1 and 8 (--decode-batches): after a prefill of --decode-prefix tokens
    (default 1024), N greedy steps (--decode-steps) fed back through past_key_values (the
    DynamicCache; eager mode, the plain transformers path: no torch.compile, no static cache)
    -> ms/step and tokens/s, under two SDPA policies:
      - default: SDPA picks cuDNN for these shapes (torch 2.11, Hopper). cuDNN builds an
        execution plan the first time it meets a shape, and every decode step has a new KV
        length: that host cost (about 1.2 ms per layer per step, seen on an H200 machine) makes
        this policy slow while lengths are new (this run measures them new), fast once seen;
      - no-cudnn: SDPA limited to flash / memory-efficient / math, no per-shape plans. The
        better of the two is the figure to cite as the peer, with the policy named.
    model.generate() under no-cudnn is timed too, as a cross-check of the manual loop
    (--no-generate skips it);
  * the bandwidth floor of a decode step: bytes of all weights read per step (every parameter
    but the embedding table, of which only the looked-up rows are read) / the measured copy
    bandwidth (read+write bytes/s of a large device copy) -> the fastest a memory-bound batch-1
    step could be; also against the read bandwidth (a large sum), the tighter figure.
--layers N builds fewer layers for a quick smoke test (the output says so).
"""

import argparse
import contextlib
import sys
import time

import torch

import gpu_common
from gpu_common import log


def parse_ints(text):
    return [int(float(x)) for x in text.split(",") if x.strip()]


def llama3_8b_config(layers):
    import transformers
    from transformers import LlamaConfig
    shape = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                 num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                 head_dim=128, max_position_embeddings=131072, rms_norm_eps=1e-5,
                 tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001,
                 hidden_act="silu", attention_bias=False, mlp_bias=False)
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    major = int(transformers.__version__.split(".")[0])
    if major >= 5:  # transformers 5 folds rope_theta and rope_scaling into rope_parameters
        return LlamaConfig(rope_parameters=dict(scaling, rope_theta=500000.0), **shape)
    return LlamaConfig(rope_theta=500000.0, rope_scaling=scaling, **shape)


def build_model(layers):
    import transformers
    from transformers import LlamaForCausalLM
    cfg = llama3_8b_config(layers)
    major = int(transformers.__version__.split(".")[0])
    dtype_kw = {"dtype": torch.bfloat16} if major >= 5 else {"torch_dtype": torch.bfloat16}
    with torch.device("cuda"):
        model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa", **dtype_kw)
    model.eval()
    return model


@torch.no_grad()
def describe_model(model):
    params = list(model.named_parameters())
    total = sum(p.numel() * p.element_size() for _, p in params)
    embed = model.get_input_embeddings().weight
    embed_bytes = embed.numel() * embed.element_size()
    devices = sorted({str(p.device) for _, p in params})
    dtypes = sorted({str(p.dtype) for _, p in params})
    rot = getattr(model.model, "rotary_emb", None)
    w = model.model.layers[0].mlp.gate_proj.weight
    return {
        "params": sum(p.numel() for _, p in params),
        "weight_bytes": total,
        "weight_bytes_read_per_step": total - embed_bytes,
        "devices": devices,
        "dtypes": dtypes,
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "rope_type": getattr(rot, "rope_type", None),
        "rope_theta": (getattr(model.config, "rope_parameters", None) or {}).get(
            "rope_theta", getattr(model.config, "rope_theta", None)),
        "layer0_gate_std": float(w.float().std()),
    }


def generate_check(model, ids, steps, keep):
    """Greedy decode through model.generate() (Hugging Face's own loop) for the prefix `ids`:
    wall time of generate minus its prefill (timed apart), over the steps after the first new
    token (which the prefill yields). Errors are returned, not raised."""
    try:
        mask = torch.ones_like(ids)
        pad = model.config.eos_token_id
        pad = pad[0] if isinstance(pad, (list, tuple)) else pad
        kw = dict(attention_mask=mask, do_sample=False, pad_token_id=pad)
        model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
        pre = gpu_common.time_cuda(lambda: model(input_ids=ids, use_cache=True, **keep),
                                   warmup=1, reps=3, target_ms=0.0, max_total_s=5.0)
        torch.cuda.synchronize()
        w0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=steps, min_new_tokens=steps, **kw)
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - w0) * 1e3
        new = int(out.shape[1] - ids.shape[1])
        if new < 2:
            return {"error": "generate produced %d tokens" % new}
        return {"new_tokens": new, "wall_ms": wall_ms, "prefill_ms": pre["median_ms"],
                "ms_per_step": (wall_ms - pre["median_ms"]) / (new - 1)}
    except Exception as e:  # an API change must not lose the other figures
        return {"error": "%s: %s" % (type(e).__name__, str(e).strip()[:300])}


def sdpa_policy(name):
    """'default': SDPA picks its backend (cuDNN first on Hopper with torch 2.11);
    'no-cudnn': SDPA may use flash, memory-efficient or math, not cuDNN."""
    if name == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                        SDPBackend.MATH])


def manual_loop(model, ids, steps, keep):
    """Greedy decode by calling the model with past_key_values (a DynamicCache) ourselves:
    prefill, 3 warm-up steps, then `steps` steps between two CUDA events."""
    out = model(input_ids=ids, use_cache=True, **keep)
    state = {"pkv": out.past_key_values, "tok": out.logits[:, -1:].argmax(-1)}
    del out

    def step():
        o = model(input_ids=state["tok"], past_key_values=state["pkv"], use_cache=True)
        state["pkv"] = o.past_key_values
        state["tok"] = o.logits[:, -1:].argmax(-1)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    w0 = time.perf_counter()
    start.record()
    for _ in range(steps):
        step()
    end.record()
    end.synchronize()
    wall_ms = (time.perf_counter() - w0) * 1e3
    return {"ms_per_step": start.elapsed_time(end) / steps, "wall_ms_per_step": wall_ms / steps}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--prefill-lengths", default="4096,8192")
    ap.add_argument("--decode-prefix", type=int, default=1024)
    ap.add_argument("--decode-steps", type=int, default=64)
    ap.add_argument("--decode-batches", default="1,8")
    ap.add_argument("--reps", type=int, default=3, help="prefill samples at most")
    ap.add_argument("--no-generate", action="store_true",
                    help="skip the model.generate() measurement")
    ap.add_argument("--layers", type=int, default=32, help="32 = Llama-3-8B; fewer for a smoke test")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="write all results as JSON here")
    args = ap.parse_args()

    import transformers
    gpu_common.require_cuda()
    info = gpu_common.device_info()
    info["transformers"] = transformers.__version__
    t_start = time.time()
    print("transformers_peer: device=%s torch=%s transformers=%s layers=%d%s" % (
        info["name"], info["torch"], transformers.__version__, args.layers,
        "" if args.layers == 32 else " (NOT the full 8B model: smoke test)"), flush=True)

    log("copy bandwidth ...")
    copy_gbs, _ = gpu_common.copy_bandwidth_gbs()
    read_gbs, _ = gpu_common.read_bandwidth_gbs()
    print("copy bandwidth %.0f GB/s (read+write), read bandwidth %.0f GB/s" % (
        copy_gbs, read_gbs), flush=True)

    log("building the model on the GPU ...")
    t0 = time.time()
    model = build_model(args.layers)
    torch.cuda.synchronize()
    desc = describe_model(model)
    desc["build_s"] = round(time.time() - t0, 1)
    print("model: %.2fB params, %.2f GB of weights (%.2f GB read per decode step), %s %s, "
          "attn=%s rope=%s theta=%s, built in %.1f s" % (
              desc["params"] / 1e9, desc["weight_bytes"] / 1e9,
              desc["weight_bytes_read_per_step"] / 1e9, desc["devices"], desc["dtypes"],
              desc["attn_implementation"], desc["rope_type"], desc["rope_theta"],
              desc["build_s"]), flush=True)
    floor_ms = desc["weight_bytes_read_per_step"] / (copy_gbs * 1e9) * 1e3
    floor_read_ms = desc["weight_bytes_read_per_step"] / (read_gbs * 1e9) * 1e3
    print("bandwidth floor, batch-1 decode step: %.2f ms (%.0f tokens/s) at copy bandwidth, "
          "%.2f ms (%.0f tokens/s) at read bandwidth" % (
              floor_ms, 1e3 / floor_ms, floor_read_ms, 1e3 / floor_read_ms), flush=True)

    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    vocab = model.config.vocab_size
    keep = {"logits_to_keep": 1}
    results = {"prefill": [], "decode": []}

    with torch.inference_mode():
        log("warm-up forward ...")
        ids = torch.randint(0, vocab, (1, 128), device="cuda", generator=gen)
        try:
            model(input_ids=ids, use_cache=True, **keep)
        except TypeError:
            keep = {}
            model(input_ids=ids, use_cache=True)
        torch.cuda.synchronize()

        for S in parse_ints(args.prefill_lengths):
            log("prefill S=%d ..." % S)
            ids = torch.randint(0, vocab, (1, S), device="cuda", generator=gen)
            torch.cuda.reset_peak_memory_stats()
            t = gpu_common.time_cuda(lambda: model(input_ids=ids, use_cache=True, **keep),
                                     warmup=1, reps=args.reps, target_ms=0.0, max_total_s=10.0)
            row = {"S": S, "ms": t["median_ms"], "samples_ms": t["samples_ms"],
                   "tokens_per_s": S / (t["median_ms"] * 1e-3),
                   "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30}
            results["prefill"].append(row)
            print("prefill S=%-5d %8.1f ms  %8.0f tokens/s  (peak %.1f GiB)" % (
                S, row["ms"], row["tokens_per_s"], row["peak_mem_gib"]), flush=True)
            del ids
            torch.cuda.empty_cache()

        for B in parse_ints(args.decode_batches):
            ids = torch.randint(0, vocab, (B, args.decode_prefix), device="cuda", generator=gen)
            kv_bytes = (B * (args.decode_prefix + args.decode_steps) * args.layers * 8 * 128
                        * 2 * 2)
            step_floor = (desc["weight_bytes_read_per_step"] + kv_bytes) / (copy_gbs * 1e9) * 1e3
            row = {"batch": B, "prefix": args.decode_prefix, "steps": args.decode_steps,
                   "floor_ms_per_step": step_floor}
            # The default policy runs first, so that every KV length it meets is new to cuDNN.
            for policy in ("default", "no-cudnn"):
                log("decode B=%d, SDPA %s: prefill %d tokens, then %d steps ..." % (
                    B, policy, args.decode_prefix, args.decode_steps))
                with sdpa_policy(policy):
                    m = manual_loop(model, ids, args.decode_steps, keep)
                m["tokens_per_s"] = B * 1e3 / m["ms_per_step"]
                m["pct_of_floor"] = 100.0 * step_floor / m["ms_per_step"]
                row[policy] = m
                print("decode B=%d prefix=%d SDPA %-9s %7.2f ms/step  %7.1f tokens/s  (floor %.2f "
                      "ms/step incl. KV: at %.0f%% of it)" % (
                          B, args.decode_prefix, policy, m["ms_per_step"], m["tokens_per_s"],
                          step_floor, m["pct_of_floor"]), flush=True)
            if not args.no_generate:
                with sdpa_policy("no-cudnn"):
                    g = generate_check(model, ids, args.decode_steps, keep)
                row["generate_no_cudnn"] = g
                if "ms_per_step" in g:
                    g["tokens_per_s"] = B * 1e3 / g["ms_per_step"]
                    print("decode B=%d prefix=%d SDPA no-cudnn via model.generate(): %.2f ms/step  "
                          "%.1f tokens/s  (cross-check; its prefill %.1f ms subtracted)" % (
                              B, args.decode_prefix, g["ms_per_step"], g["tokens_per_s"],
                              g["prefill_ms"]), flush=True)
                else:
                    print("decode B=%d model.generate(): failed: %s" % (B, g.get("error")),
                          flush=True)
            results["decode"].append(row)
            del ids
            torch.cuda.empty_cache()

    elapsed = time.time() - t_start
    log("transformers_peer: %.1f s" % elapsed)
    gpu_common.write_json(args.out, {
        "script": "transformers_peer", "device": info, "args": vars(args), "model": desc,
        "copy_gbs": copy_gbs, "read_gbs": read_gbs, "floor_ms_per_step_b1_weights": floor_ms,
        "floor_read_ms_per_step_b1_weights": floor_read_ms, "results": results,
        "seconds": round(elapsed, 1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
