#!/usr/bin/env bash
# gpu_services_check.sh — the services on the CUDA backend, on one GPU (run by gpu_check.sh):
# `sparseserve up --device cuda` with one prefill and two decode workers sharing the GPU, then
# greedy stories260K through the router, short (prefill on the decode worker) and long enough to
# cross --disagg-threshold; both must equal the llama2.c golden continuation.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
model=models/stories260K/stories260K.gguf
log=$(mktemp)
sparseserve up --device cuda --model "$model" --num-prefill 1 --num-decode 2 \
  --gpu-memory-fraction 0.2 --disagg-threshold 4 >"$log" 2>&1 &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid; rm -f "$log"' EXIT
for _ in $(seq 120); do grep -q '^READY up' "$log" && break; sleep 0.5; done
addr=$(awk '/^READY up/ {print $3}' "$log")
[ -n "$addr" ] || { echo "FAIL up did not start"; cat "$log"; exit 1; }
fails=0
for i in 1 2; do
  if sparseserve generate --server "$addr" --prompt "Once upon a time" --max-tokens 60 \
      --temperature 0 2>/dev/null | cmp -s - tests/data/golden_once_upon_a_time.txt; then
    echo "ok   golden through up --device cuda (request $i)"
  else
    echo "FAIL golden through up --device cuda (request $i)"; fails=$((fails + 1))
  fi
done
kill -INT $pid; wait $pid; rc=$?
trap 'rm -f "$log"' EXIT
[ $rc -eq 0 ] && echo "ok   up stopped cleanly" || { echo "FAIL up exit code $rc"; fails=$((fails + 1)); }
grep -E 'KV transfer|error|ERROR' "$log" | head -5
exit $fails
