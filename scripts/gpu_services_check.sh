#!/usr/bin/env bash
# gpu_services_check.sh [UP FLAGS...] — the services on the CUDA backend, on one GPU (run by
# gpu_check.sh; extra flags go to `up`, e.g. --prefill-tensor-parallel 2 on two GPUs, or
# --kv-staging on): `sparseserve up --device cuda` with one prefill and two decode workers sharing
# the GPU, then greedy stories260K through the router with prompts long enough to cross
# --disagg-threshold, so they are prefilled on the prefill worker and their KV moves to a decode
# worker. Checks: the golden continuation (twice), a ~300-token prompt (several KV blocks per
# layer) equal to a single-process `generate --device cuda`, and the metrics proving the KV really
# went prefill -> decode the way EXPECT_KV says: `direct` (the default: GPU to GPU over UCX's
# cuda_ipc, --kv-staging=auto with the transport present; no staging copy on either side) or
# `staged` (through host memory: prefill worker device->host and decode worker host->device
# staging copies).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
model=models/stories260K/stories260K.gguf
log=$(mktemp)
sparseserve up --device cuda --model "$model" --num-prefill 1 --num-decode 2 \
  --gpu-memory-fraction 0.2 --disagg-threshold 4 "$@" >"$log" 2>&1 &
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
long="Once upon a time there was a little girl named Lily. She liked to play in the park."
long="$long $long $long $long $long $long $long $long $long $long $long $long"
want=$(sparseserve generate --device cuda --model "$model" --prompt "$long" --max-tokens 40 \
  --temperature 0 --gpu-memory-fraction 0.2 2>/dev/null)
got=$(sparseserve generate --server "$addr" --prompt "$long" --max-tokens 40 --temperature 0 \
  2>/dev/null)
if [ -n "$want" ] && [ "$got" = "$want" ]; then
  echo "ok   long prompt through up --device cuda = single-process generate --device cuda"
else
  echo "FAIL long prompt through up: '$got' vs single process '$want'"; fails=$((fails + 1))
fi

# The OpenAI HTTP API on CUDA workers: the golden text, and logprobs computed on the GPU (greedy:
# each token is its own most probable alternative; the first comes from the prefill worker).
http=$(awk '/^READY up/ {print $7}' "$log")
if python3 - "$http" <<'PY'
import json, sys, urllib.request
body = json.dumps({"prompt": "Once upon a time", "max_tokens": 60, "temperature": 0,
                   "logprobs": 3, "ignore_eos": True}).encode()
req = urllib.request.Request(f"http://{sys.argv[1]}/v1/completions", data=body,
                             headers={"Content-Type": "application/json"})
out = json.loads(urllib.request.urlopen(req, timeout=60).read())
choice = out["choices"][0]
golden = open("tests/data/golden_once_upon_a_time.txt").read()[:-1]
lp = choice["logprobs"]
ok = choice["text"] == golden and len(lp["tokens"]) == 60 and all(
    len(top) == 3 and abs(max(top.values()) - v) < 1e-6 and v <= 0
    for v, top in zip(lp["token_logprobs"], lp["top_logprobs"]))
print("first logprobs", lp["token_logprobs"][:3])
sys.exit(0 if ok else 1)
PY
then
  echo "ok   OpenAI HTTP API on CUDA workers: golden text, logprobs from the GPU"
else
  echo "FAIL OpenAI HTTP API on CUDA workers"; fails=$((fails + 1))
fi

# Sum of the samples of metric $2 on the /metrics page at $1 (host:port).
metric() {
  python3 - "$1" "$2" <<'PY'
import sys, urllib.request
page = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=5).read().decode()
name = sys.argv[2]
print(sum(float(l.rsplit(" ", 1)[1]) for l in page.splitlines()
          if l.startswith(name + "{") or l.startswith(name + " ")))
PY
}
positive() { python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)" "$1"; }
expect=${EXPECT_KV:-direct}
prefill_metrics=$(awk '/^WORKER prefill/ {print $5; exit}' "$log")
bytes=$(metric "$prefill_metrics" sparseserve_kv_transfer_bytes_total)
copies=$(metric "$prefill_metrics" sparseserve_kv_staging_copy_seconds_count)
adopted=0
for m in $(awk '/^WORKER decode/ {print $5}' "$log"); do
  adopted=$(python3 -c "import sys; print(float(sys.argv[1]) + float(sys.argv[2]))" "$adopted" \
    "$(metric "$m" sparseserve_kv_staging_copy_seconds_count)")
done
direct_lines=$(grep -c 'KV transfer GPU to GPU' "$log")
if [ "$expect" = staged ]; then
  if positive "$bytes" && positive "$copies" && positive "$adopted"; then
    echo "ok   disaggregated prefill on the GPU, staged: $bytes KV bytes, $copies prefill and" \
      "$adopted decode staging copies"
  else
    echo "FAIL staged KV: bytes '$bytes', prefill staging copies '$copies', decode '$adopted'"
    fails=$((fails + 1))
  fi
else
  # Both ends log "KV transfer GPU to GPU ..." at start: 1 prefill + 2 decode workers.
  if positive "$bytes" && ! positive "$copies" && ! positive "$adopted" && [ "$direct_lines" = 3 ]
  then
    echo "ok   disaggregated prefill on the GPU, GPU to GPU: $bytes KV bytes, no staging copy"
  else
    echo "FAIL GPU-direct KV: bytes '$bytes', staging copies '$copies' + '$adopted' (want 0)," \
      "$direct_lines of 3 workers GPU to GPU"
    fails=$((fails + 1))
  fi
fi

kill -INT $pid; wait $pid; rc=$?
trap 'rm -f "$log"' EXIT
[ $rc -eq 0 ] && echo "ok   up stopped cleanly" || { echo "FAIL up exit code $rc"; fails=$((fails + 1)); }
grep -E 'KV transfer|error|ERROR' "$log" | head -8
exit $fails
