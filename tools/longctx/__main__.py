"""Writes long-context evaluation tasks as JSON lines, for `sparseserve eval --tasks FILE`.

  python3 tools/longctx --tokenizer tests/data/longctx_model/tokenizer.json \
      --tasks passkey,multikey --lengths 2K,4K --num 20 --out tasks.jsonl

Each line is one task (see tasks.py for the fields); the same arguments give the same file.
"""

import argparse
import json
import multiprocessing
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from longctx import bpe, tasks  # noqa: E402


def parse_length(text):
    text = text.strip().upper()
    scale = 1024 if text.endswith("K") else 1
    value = int(text[:-1] if scale > 1 else text) * scale
    if value < 64:
        raise argparse.ArgumentTypeError(f"length {text} is below 64 tokens")
    return value


_encoder = None


def _init(tokenizer):
    global _encoder
    _encoder = bpe.ByteLevelBpe(tokenizer)


def _line(spec):
    task, length, seed, gen_tokens = spec
    item = tasks.make_task(task, length, seed, _encoder, gen_tokens)
    item["seed"] = seed
    return json.dumps(item, sort_keys=True) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="longctx", description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"tasks: {', '.join(tasks.TASKS)}")
    parser.add_argument("--tokenizer", required=True,
                        help="the model's tokenizer.json (lengths are counted in its tokens)")
    parser.add_argument("--tasks", default=",".join(tasks.TRAINED_TASKS),
                        help="comma-separated task names (default: every scored task)")
    parser.add_argument("--lengths", default="4K",
                        help="comma-separated prompt lengths in tokens, K = 1024 (default 4K)")
    parser.add_argument("--num", type=int, default=20, help="prompts per task and length")
    parser.add_argument("--seed", type=int, default=0, help="first seed; prompt i uses seed+i")
    parser.add_argument("--gen-tokens", type=int, default=4096,
                        help="tokens to generate for longgen (default 4096)")
    parser.add_argument("--out", default="-", help="output file (default: stdout)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="processes writing prompts (long prompts take ~2 ms per 1K tokens)")
    args = parser.parse_args(argv)

    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in names if t not in tasks.TASKS]
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}; known: {', '.join(tasks.TASKS)}")
    try:
        lengths = [parse_length(x) for x in args.lengths.split(",")]
    except (ValueError, argparse.ArgumentTypeError) as e:
        parser.error(f"--lengths: {e}")
    if args.num < 1:
        parser.error("--num must be at least 1")
    specs = [(task, length, args.seed + i, args.gen_tokens)
             for task in names for length in lengths for i in range(args.num)]
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    with out:
        if args.jobs > 1:
            with multiprocessing.Pool(args.jobs, _init, (args.tokenizer,)) as pool:
                lines = pool.imap(_line, specs, chunksize=4)
                for line in lines:
                    out.write(line)
        else:
            _init(args.tokenizer)
            for spec in specs:
                out.write(_line(spec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
