#!/usr/bin/env python3
"""Sums Nsight Compute's kernel times per call, one CSV log per NVTX range.

Input: logs of `ncu --nvtx --nvtx-include "NAME/" --metrics gpu__time_duration.sum --csv ...`
named NAME.log (or PREFIX_NAME.log), each profiling CALLS calls of one measurement (the
benchmarks' --ncu mode makes three). Prints, per range, the kernels of one call with their mean
device time and the call's total: what the call costs when replayed from a CUDA graph (no launch
gaps; kernels run one after another). With a "cudnn" range among them, each total is also set
against it.
"""

import argparse
import collections
import csv
import io
import os
import sys


def read_kernels(path):
    """[(kernel name, ns)] in launch order from an ncu --csv log (progress lines skipped)."""
    lines = open(path, errors="replace").read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    out = []
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = {"ns": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}.get(
            r.get("Metric Unit", "ns"), 1.0)
        out.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * scale))
    return out


def short(name):
    for noise in ("(anonymous namespace)::", "unnamed>::", "sparseserve::kernels::cuda::"):
        name = name.replace(noise, "")
    return name.split("(")[0][:70]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--calls", type=int, default=3, help="calls profiled per range")
    args = ap.parse_args()
    totals = {}
    for path in args.logs:
        name = os.path.basename(path).rsplit(".", 1)[0].split("_", 2)[-1]
        kernels = read_kernels(path)
        if not kernels:
            print("%s: no kernels profiled" % name)
            continue
        per = collections.OrderedDict()
        for k, ns in kernels:
            entry = per.setdefault(short(k), [0, 0.0])
            entry[0] += 1
            entry[1] += ns
        total_us = sum(ns for _, ns in kernels) / 1e3 / args.calls
        totals[name] = total_us
        print("%s: %d kernels a call, %.1f us a call" % (
            name, round(len(kernels) / args.calls), total_us))
        for k, (count, ns) in per.items():
            print("  %6.2f us x %4.1f  %s" % (ns / 1e3 / count, count / args.calls, k))
    base = totals.get("cudnn")
    if base:
        for name, us in totals.items():
            if name != "cudnn":
                print("%s / cudnn: %.1f / %.1f us = %.1fx faster" % (name, us, base, base / us))
    return 0


if __name__ == "__main__":
    sys.exit(main())
