#!/usr/bin/env python3
"""The long-context accuracy table (issue 11): tasks x lengths for several attention configs.

Makes the RULER-style prompts once per length (tools/longctx), runs `sparseserve eval --device
cuda` for every (config, length) pair, one job per visible GPU at a time (the longest lengths
first, so a machine with several GPUs finishes the grid in about the time of its largest share),
and prints one markdown table per config: score % with the measured attention density % in
every cell, and the mean time to first token per length. Every eval's JSON is kept in --out.

Configs are named presets (--configs) or NAME=FLAGS pairs (--config, repeatable):
  dense                      both phases dense
  window1024                 sliding window of 1024 (+4 sinks), prefill and decode
  minference                 the model's searched minference_config.json (prompts >= 1K sparse)
  tokenselect2048            dense prefill, TokenSelect decode, k 2048 (128 + k + 512 tokens)
  tokenselect_kvh2048_l1024  the same per KV head with 1024 local tokens
"""
import argparse
import json
import os
import queue
import shlex
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from longctx.__main__ import parse_length  # noqa: E402  (the generator's own "4K" reading)

PRESETS = {
    "dense": "",
    "window1024": "--attention sliding-window --sliding-window 1024",
    "minference": "--prefill-attention minference --sparse-prefill-threshold 1024 "
                  "--minference-config {model}/minference_config.json",
    "tokenselect2048": "--decode-attention tokenselect --tokenselect-k 2048",
    "tokenselect_kvh2048_l1024": "--decode-attention tokenselect --tokenselect-k 2048 "
                                 "--tokenselect-per-kv-head --tokenselect-local 1024",
}


def visible_gpus():
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g for g in env.split(",") if g.strip()]
    try:
        lines = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                               check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return ["0"]
    return [str(i) for i, l in enumerate(lines) if l.startswith("GPU ")] or ["0"]


def make_prompts(args, length, path):
    # A prompts file is reused only if it was made with the same model, tasks and count.
    meta = {"tokenizer": f"{args.model}/tokenizer.json", "tasks": args.tasks, "num": args.num}
    if os.path.exists(path) and os.path.exists(path + ".meta"):
        with open(path + ".meta") as f:
            if json.load(f) == meta:
                return
    cmd = [sys.executable, os.path.join(ROOT, "tools", "longctx"),
           "--tokenizer", f"{args.model}/tokenizer.json",
           "--tasks", args.tasks, "--lengths", str(length), "--num", str(args.num),
           "--jobs", str(args.jobs), "--out", path + ".part"]
    subprocess.run(cmd, check=True)
    os.replace(path + ".part", path)
    with open(path + ".meta", "w") as f:
        json.dump(meta, f)


def run_jobs(args, jobs, gpus):
    """Runs each (config, length) eval on the next free GPU; returns {(config, length): rc}."""
    todo = queue.Queue()
    for job in jobs:
        todo.put(job)
    results, lock, start = {}, threading.Lock(), time.time()

    def worker(gpu):
        while True:
            try:
                name, length, flags = todo.get_nowait()
            except queue.Empty:
                return
            stem = f"{args.out}/{name}_{length // 1024}k"
            cmd = [args.sparseserve, "eval", "--device", args.device, "--model", args.model,
                   "--tasks", f"{args.prompts_dir}/tasks_{length // 1024}k.jsonl",
                   "--out", stem + ".json"]
            cmd += shlex.split(flags.format(model=args.model))
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
            t0 = time.time()
            with open(stem + ".log", "w") as log:
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
            with lock:
                results[(name, length)] = rc
                print(f"[{time.time() - start:6.0f} s] gpu {gpu}: {name} {length // 1024}K "
                      f"{'done' if rc == 0 else f'FAILED rc={rc}'} in {time.time() - t0:.0f} s "
                      f"({len(results)}/{len(jobs)})", flush=True)

    threads = [threading.Thread(target=worker, args=(g,)) for g in gpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def markdown(args, configs, lengths, results):
    lines, summary = [], {}
    tasks = args.tasks.split(",")
    for name in configs:
        cells = {}
        for length in lengths:
            path = f"{args.out}/{name}_{length // 1024}k.json"
            if results.get((name, length)) != 0 or not os.path.exists(path):
                continue
            for row in json.load(open(path))["table"]:
                cells[(row["task"], row["length"])] = row
        summary[name] = {f"{t}/{l}": cells[(t, l)] for (t, l) in cells}
        head = [f"{l // 1024}K" for l in lengths]
        flags = configs[name].format(model=args.model) or "dense"
        lines += [f"### {name}: `{flags}`", "",
                  "score % (density %) per task and length, "
                  f"{args.num} prompts per cell", "",
                  "| task | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
        for task in tasks + ["TTFT ms"]:
            row = []
            for length in lengths:
                if task == "TTFT ms":
                    ttfts = [c["ttft_ms"] for (t, l), c in cells.items() if l == length]
                    row.append(f"{min(ttfts):.1f}-{max(ttfts):.1f}" if ttfts else "-")
                    continue
                c = cells.get((task, length))
                if c is None:
                    row.append("-")
                    continue
                score = f"{100 * c['score']:.1f}" if "score" in c else "-"
                density = f"{100 * c['density']:.1f}" if "density" in c else "?"
                if "decode_density" in c:
                    density += f", dec {100 * c['decode_density']:.1f}"
                row.append(f"{score} ({density})")
            lines.append(f"| {task} | " + " | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines), summary


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tests/data/longctx_model")
    p.add_argument("--tasks", default="passkey,multikey,multivalue,vartrack,cwe")
    p.add_argument("--lengths", default="4K,8K,16K,32K")
    p.add_argument("--num", type=int, default=200, help="prompts per task and length")
    p.add_argument("--configs", default="dense,window1024",
                   help=f"comma-separated presets: {', '.join(PRESETS)}")
    p.add_argument("--config", action="append", default=[], metavar="NAME=FLAGS",
                   help="an extra config: a name and the eval flags it runs with")
    p.add_argument("--out", required=True, help="directory for the JSON, logs and table.md")
    p.add_argument("--prompts-dir", help="where the prompts go (default: OUT/prompts)")
    p.add_argument("--jobs", type=int, default=os.cpu_count(), help="prompt-writing processes")
    p.add_argument("--sparseserve", default="sparseserve")
    p.add_argument("--device", default=os.environ.get("LONGCTX_DEVICE", "cuda"),
                   help="cuda (one eval per GPU at a time) or cpu (default: $LONGCTX_DEVICE, "
                        "else cuda; the check scripts that call this honour it too)")
    args = p.parse_args()
    configs = {}
    for name in filter(None, args.configs.split(",")):
        if name not in PRESETS:
            p.error(f"unknown config '{name}' (presets: {', '.join(PRESETS)})")
        configs[name] = PRESETS[name]
    for spec in args.config:
        name, sep, flags = spec.partition("=")
        if not sep or not name:
            p.error(f"--config wants NAME=FLAGS, got '{spec}'")
        configs[name] = flags
    if not configs:
        p.error("no configs")
    lengths = sorted({parse_length(l) for l in args.lengths.split(",")}, reverse=True)
    args.prompts_dir = args.prompts_dir or f"{args.out}/prompts"
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.prompts_dir, exist_ok=True)
    t0 = time.time()
    for length in lengths:
        make_prompts(args, length, f"{args.prompts_dir}/tasks_{length // 1024}k.jsonl")
    print(f"prompts: {len(lengths)} lengths x {args.num} per task in {time.time() - t0:.0f} s",
          flush=True)
    gpus = visible_gpus() if args.device == "cuda" else ["cpu"]
    jobs = [(name, length, flags) for length in lengths for name, flags in configs.items()]
    results = run_jobs(args, jobs, gpus)
    text, summary = markdown(args, configs, sorted(lengths), results)
    print(text)
    with open(f"{args.out}/table.md", "w") as f:
        f.write(text + "\n")
    json.dump(summary, open(f"{args.out}/table.json", "w"), indent=1)
    failed = [f"{n} {l // 1024}K" for (n, l), rc in results.items() if rc != 0]
    if failed:
        print("failed:", ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
