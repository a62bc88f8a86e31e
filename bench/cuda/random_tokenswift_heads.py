#!/usr/bin/env python3
"""random_tokenswift_heads.py OUT --hidden H [--heads 3] [--seed S]

Writes a TokenSwift draft-heads adapter (the layout tools/train_spec_adapters.py writes:
heads.J.norm.weight [H] and heads.J.proj.weight [H, H]) with random bf16 projections, for speed
runs on the synthetic models, which have no trained heads (`sparseserve bench spec --model
synthetic:llama3-8b --tokenswift-heads OUT`). Random weights measure speed, never acceptance:
every figure made with such heads says so. An 8B-sized adapter is 96 MiB, too large to carry to
the GPU machine, so it is made there; only the standard library is used (no numpy there or here).
"""
import argparse
import os
import random
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import safetensors_file  # noqa: E402


def random_bf16(count, rng):
    """count bf16 values of magnitude 2^-7 .. 2^-6 with random signs and mantissas."""
    data = bytearray(rng.randbytes(2 * count))
    # Little-endian bf16: the low byte holds the exponent's last bit and the 7 mantissa bits, the
    # high byte the sign and the exponent's first 7 bits. Exponent 120 (2^-7): last bit 0, first
    # seven 0x3C.
    low = bytes(b & 0x7F for b in range(256))
    high = bytes((b & 0x80) | 0x3C for b in range(256))
    data[0::2] = bytes(data[0::2]).translate(low)
    data[1::2] = bytes(data[1::2]).translate(high)
    return bytes(data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("out")
    parser.add_argument("--hidden", type=int, required=True, help="the model's hidden size")
    parser.add_argument("--heads", type=int, default=3, help="draft heads (TokenSwift: 3)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.hidden < 1 or args.heads < 1:
        parser.error("--hidden and --heads must be positive")
    rng = random.Random(args.seed)
    h = args.hidden
    entries = []
    for j in range(args.heads):
        entries.append((f"heads.{j}.norm.weight", "F32", [h], struct.pack(f"<{h}f", *([1.0] * h))))
        entries.append((f"heads.{j}.proj.weight", "BF16", [h, h], random_bf16(h * h, rng)))
    size = safetensors_file.write(
        args.out, entries, {"format": "sparseserve.tokenswift_heads", "hidden_size": str(h),
                            "num_heads": str(args.heads), "weights": "random (speed runs only)"})
    print(f"{args.out}: {args.heads} random heads of hidden size {h}, {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
