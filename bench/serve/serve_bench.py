#!/usr/bin/env python3
"""Serving benchmark (issue 18): `sparseserve up` under a real OpenAI-speaking load generator,
aiperf (PyPI), with Poisson arrivals and a mix of short and long prompts. For each server
configuration and request rate it records TTFT, inter-token latency (ITL) and end-to-end latency
percentiles per prompt-length bucket, and goodput at SLOs:

  SLO of a bucket = TTFT <= F x and ITL <= F x the baseline configuration's median at the lowest
  rate in that bucket (F = --slo-factor, default 2; the baseline is the first --config).
  goodput at a rate = requests meeting their bucket's SLO / the run's duration (requests/s);
  a configuration's goodput = the best over its rates; DistServe's form, the highest rate whose
  attainment is >= 90%, is reported beside it.

Usage (bench/serve/README.md has the GPU and CPU commands):
  serve_bench.py --bin build/bin/sparseserve --model MODEL --tokenizer HF_TOKENIZER_DIR \
      --config 'colocated-dense=--num-prefill 0 --num-decode 2' \
      --config 'disaggregated-dense=--num-prefill 1 --num-decode 1' \
      --rates 1,2,4 --requests 64 --seq-dist '512,128:70;16384,128:30' --bucket-tokens 4096 \
      --out bench/serve/out
Writes OUT/summary.json, OUT/summary.md and OUT/latency_vs_rate.png, OUT/goodput_vs_rate.png, and
keeps each aiperf run's artifacts under OUT/<config>/rate_<r>/. Prints progress on stderr.
Timing is measured, never asserted; the smoke run (smoke.sh) checks only that it ran.
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time


def log(msg):
    print(f"serve_bench: {msg}", file=sys.stderr, flush=True)


def percentile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class Server:
    """`sparseserve up` with the configuration's flags; its HTTP address from the READY line."""

    def __init__(self, binary, model, flags, start_timeout):
        args = [binary, "up", f"--model={model}", "--log-level=warning"] + shlex.split(flags)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, start_new_session=True)
        deadline = time.time() + start_timeout
        self.http = None
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"sparseserve up exited ({' '.join(args)})")
            words = line.split()
            if words and words[0] == "READY":
                if "http" not in words:
                    raise RuntimeError("sparseserve up has no HTTP API (--http-port -1?)")
                self.http = words[words.index("http") + 1]
                return
        self.stop()
        raise RuntimeError("sparseserve up not ready in time")

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def run_aiperf(args, http, rate, seed, out_dir):
    cmd = [args.aiperf, "profile", "--model", args.served_model_name, "--url", f"http://{http}",
           "--endpoint-type", "completions", "--streaming", "--tokenizer", args.tokenizer,
           "--use-server-token-count", "--arrival-pattern", "poisson", "--request-rate",
           str(rate), "--request-count", str(args.requests), "--seq-dist", args.seq_dist,
           "--random-seed", str(seed), "--artifact-dir", out_dir, "--ui", "none",
           "--extra-inputs", "ignore_eos:true"]
    if args.warmup > 0:
        cmd += ["--warmup-request-count", str(args.warmup)]
    t0 = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout)
    with open(os.path.join(out_dir, "aiperf_stdout.txt"), "w") as f:
        f.write(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"aiperf failed ({done.returncode}); see {out_dir}/aiperf_stdout.txt")
    return time.time() - t0


def load_records(out_dir):
    """Per request: prompt tokens (the server's count), TTFT, mean ITL, e2e (ms), ok."""
    records = []
    with open(os.path.join(out_dir, "profile_export.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("metadata", {}).get("benchmark_phase", "profiling") != "profiling":
                continue
            m = r.get("metrics", {})
            value = lambda name: m.get(name, {}).get("value")  # noqa: E731
            records.append({"prompt_tokens": value("usage_prompt_tokens")
                            or value("input_sequence_length"),
                            "ttft_ms": value("time_to_first_token"),
                            "itl_ms": value("inter_token_latency"),
                            "e2e_ms": value("request_latency"),
                            "ok": not r.get("error") and value("request_latency") is not None})
    with open(os.path.join(out_dir, "profile_export_aiperf.json")) as f:
        summary = json.load(f)
    duration = None
    for key in ("benchmark_duration", "duration"):
        node = summary.get(key)
        if isinstance(node, dict) and "avg" in node:
            duration = node["avg"]
        elif isinstance(node, (int, float)):
            duration = float(node)
    return records, duration


def bucket_of(tokens, boundary):
    return "short" if tokens is not None and tokens < boundary else "long"


def stats(records):
    out = {"requests": len(records), "errors": sum(not r["ok"] for r in records)}
    for key in ("ttft_ms", "itl_ms", "e2e_ms"):
        values = [r[key] for r in records if r["ok"] and r[key] is not None]
        out[key] = {f"p{q}": percentile(values, q) for q in (50, 90, 99)}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", required=True, help="the sparseserve binary")
    p.add_argument("--model", required=True, help="model path given to `up --model`")
    p.add_argument("--served-model-name", default=None,
                   help="model id the HTTP API serves (default: the model file's stem)")
    p.add_argument("--tokenizer", required=True,
                   help="local Hugging Face tokenizer directory aiperf builds prompts with")
    p.add_argument("--config", action="append", required=True,
                   help="NAME=UP FLAGS; the first is the SLO baseline (colocated dense)")
    p.add_argument("--rates", default="1,2,4", help="request rates (requests/s), comma-separated")
    p.add_argument("--requests", type=int, default=64, help="requests per rate")
    p.add_argument("--warmup", type=int, default=4,
                   help="warm-up requests per run (not counted; long ones capture the server's "
                        "graphs and grow its buffers before the timed requests)")
    p.add_argument("--seq-dist", default="512,128:70;16384,128:30",
                   help="aiperf --seq-dist: ISL,OSL:percent pairs (the long-prompt mix)")
    p.add_argument("--bucket-tokens", type=int, default=4096,
                   help="prompt tokens (server count) from which a request is in the long bucket")
    p.add_argument("--slo-factor", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--aiperf", default="aiperf", help="the aiperf executable")
    p.add_argument("--start-timeout", type=float, default=600)
    p.add_argument("--run-timeout", type=float, default=1800)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if args.served_model_name is None:
        base = os.path.basename(os.path.normpath(args.model))
        args.served_model_name = base[:-5] if base.endswith(".gguf") else base
    rates = [float(r) for r in args.rates.split(",")]
    configs = []
    for c in args.config:
        name, _, flags = c.partition("=")
        configs.append((name, flags))
    os.makedirs(args.out, exist_ok=True)

    results = {}  # config -> rate -> {"bucket": stats, "duration_s", "records"}
    for name, flags in configs:
        log(f"config {name}: up {flags}")
        server = Server(args.bin, args.model, flags, args.start_timeout)
        try:
            results[name] = {}
            for index, rate in enumerate(rates):
                out_dir = os.path.join(args.out, name, f"rate_{rate:g}")
                os.makedirs(out_dir, exist_ok=True)
                log(f"  rate {rate:g} req/s, {args.requests} requests ...")
                # Prompts of their own per rate (the server's prefix cache outlives a rate's run),
                # the same ones for every configuration.
                wall = run_aiperf(args, server.http, rate, args.seed + 1000 * index, out_dir)
                records, duration = load_records(out_dir)
                by_bucket = {}
                for r in records:
                    by_bucket.setdefault(bucket_of(r["prompt_tokens"], args.bucket_tokens),
                                         []).append(r)
                results[name][rate] = {"records": records, "duration_s": duration or wall,
                                       "buckets": {b: stats(rs) for b, rs in by_bucket.items()}}
                s = results[name][rate]["buckets"]
                log("    " + ", ".join(
                    f"{b}: {v['requests']} req, TTFT p50 {v['ttft_ms']['p50'] or 0:.1f} ms, "
                    f"ITL p50 {v['itl_ms']['p50'] or 0:.2f} ms" for b, v in sorted(s.items())))
        finally:
            server.stop()

    # SLOs from the baseline's lowest rate, per bucket (median x factor).
    baseline = results[configs[0][0]][rates[0]]["buckets"]
    slo = {b: {"ttft_ms": args.slo_factor * v["ttft_ms"]["p50"],
               "itl_ms": args.slo_factor * v["itl_ms"]["p50"]}
           for b, v in baseline.items() if v["ttft_ms"]["p50"] and v["itl_ms"]["p50"]}
    summary = {"configs": {}, "slo": slo, "slo_factor": args.slo_factor, "rates": rates,
               "seq_dist": args.seq_dist, "bucket_tokens": args.bucket_tokens,
               "requests_per_rate": args.requests}
    for name, _ in configs:
        per_rate = {}
        for rate in rates:
            run = results[name][rate]
            met = 0
            for r in run["records"]:
                b = slo.get(bucket_of(r["prompt_tokens"], args.bucket_tokens))
                if (b and r["ok"] and r["ttft_ms"] is not None and r["ttft_ms"] <= b["ttft_ms"]
                        and (r["itl_ms"] is None or r["itl_ms"] <= b["itl_ms"])):
                    met += 1
            n = len(run["records"])
            per_rate[rate] = {"buckets": run["buckets"], "duration_s": run["duration_s"],
                              "attainment": met / n if n else 0.0,
                              "goodput_rps": met / run["duration_s"] if run["duration_s"] else 0.0}
        goodput = max(v["goodput_rps"] for v in per_rate.values())
        attained = [r for r in rates if per_rate[r]["attainment"] >= 0.9]
        summary["configs"][name] = {"flags": dict(configs)[name], "per_rate": per_rate,
                                    "goodput_rps": goodput,
                                    "max_rate_90pct_slo": max(attained) if attained else None}
    base_goodput = summary["configs"][configs[0][0]]["goodput_rps"]
    for name, c in summary["configs"].items():
        c["goodput_vs_baseline"] = c["goodput_rps"] / base_goodput if base_goodput else None
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    write_markdown(summary, os.path.join(args.out, "summary.md"))
    plot(summary, args.out)
    log(f"wrote {args.out}/summary.json, summary.md and the plots")
    print(open(os.path.join(args.out, "summary.md")).read())


def write_markdown(summary, path):
    lines = [f"SLOs (x{summary['slo_factor']:g} the baseline's median at the lowest rate): " +
             "; ".join(f"{b}: TTFT <= {v['ttft_ms']:.1f} ms, ITL <= {v['itl_ms']:.2f} ms"
                       for b, v in sorted(summary["slo"].items())), "",
             "| config | rate (req/s) | bucket | requests | TTFT p50/p90/p99 (ms) | "
             "ITL p50/p90/p99 (ms) | e2e p50/p90 (ms) | SLO attainment | goodput (req/s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    for name, c in summary["configs"].items():
        for rate, run in c["per_rate"].items():
            for b, s in sorted(run["buckets"].items()):
                lines.append(
                    f"| {name} | {rate:g} | {b} | {s['requests']} ({s['errors']} errors) | "
                    f"{fmt(s['ttft_ms']['p50'])} / {fmt(s['ttft_ms']['p90'])} / "
                    f"{fmt(s['ttft_ms']['p99'])} | {fmt(s['itl_ms']['p50'])} / "
                    f"{fmt(s['itl_ms']['p90'])} / {fmt(s['itl_ms']['p99'])} | "
                    f"{fmt(s['e2e_ms']['p50'])} / {fmt(s['e2e_ms']['p90'])} | "
                    f"{run['attainment']:.0%} | {run['goodput_rps']:.2f} |")
    lines += ["", "| config | goodput (req/s, best rate) | vs baseline | highest rate with >= 90% "
              "SLO attainment |", "| --- | --- | --- | --- |"]
    for name, c in summary["configs"].items():
        ratio = c["goodput_vs_baseline"]
        lines.append(f"| {name} | {c['goodput_rps']:.2f} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}x'} | "
                     f"{c['max_rate_90pct_slo'] if c['max_rate_90pct_slo'] is not None else '-'} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def plot(summary, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no plots")
        return
    buckets = sorted({b for c in summary["configs"].values() for run in c["per_rate"].values()
                      for b in run["buckets"]})
    fig, axes = plt.subplots(2, len(buckets), figsize=(6 * len(buckets), 8), squeeze=False)
    for col, b in enumerate(buckets):
        for row, metric in enumerate(("ttft_ms", "itl_ms")):
            ax = axes[row][col]
            for name, c in summary["configs"].items():
                rates = [r for r in summary["rates"] if b in c["per_rate"][r]["buckets"]]
                for q, style in (("p50", "-"), ("p90", "--"), ("p99", ":")):
                    ys = [c["per_rate"][r]["buckets"][b][metric][q] for r in rates]
                    ax.plot(rates, ys, style, marker="o", label=f"{name} {q}")
            if b in summary["slo"]:
                ax.axhline(summary["slo"][b][metric], color="red", linewidth=0.8, label="SLO")
            ax.set_xlabel("request rate (req/s)")
            ax.set_ylabel(f"{'TTFT' if metric == 'ttft_ms' else 'ITL'} (ms)")
            ax.set_title(f"{b} prompts")
            ax.set_yscale("log")
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "latency_vs_rate.png"), dpi=110)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, c in summary["configs"].items():
        ax.plot(summary["rates"], [c["per_rate"][r]["goodput_rps"] for r in summary["rates"]],
                marker="o", label=name)
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("goodput (req/s meeting the SLOs)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "goodput_vs_rate.png"), dpi=110)


if __name__ == "__main__":
    main()
