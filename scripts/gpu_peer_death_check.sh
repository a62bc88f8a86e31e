#!/usr/bin/env bash
# gpu_peer_death_check.sh — issue 20's mirror case on the GPU, with KV moving GPU to GPU: the decode
# worker is SIGKILLed while the prefill worker PUTs into its memory over UCX's cuda_ipc (a slowed
# transfer: --fault-kv-put-delay-ms 1000 per layer), then the prefill worker must still be alive,
# SERVING, count the failed transfer, and prefill the next request into a fresh decode worker
# with the single-process output (its CUDA context must not be poisoned by the dead peer's mapped
# memory). Then the reverse: the prefill worker killed mid-transfer, the decode worker serves on.
# Run by gpu_check.sh's `services` stage on a GPU machine (stories260K).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
model=models/stories260K/stories260K.gguf
prompt="Once upon a time there was a little girl who liked to play in the park with her dog"
flags=(--model "$model" --device cuda --gpu-memory-fraction 0.2)
dir=$(mktemp -d)
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$dir"' EXIT
fails=0
check() { if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi; }

# start NAME ROLE FLAGS...: starts a worker or router, waits for READY, sets ${NAME}_pid/_addr/_metrics
# (through printf -v, which shellcheck cannot follow: SC2154 below is expected).
# shellcheck disable=SC2154
start() {
  local name=$1 role=$2; shift 2
  sparseserve "$role" --address=127.0.0.1:0 --metrics_address=127.0.0.1:0 "$@" \
    >"$dir/$name.out" 2>"$dir/$name.err" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 240); do grep -q '^READY' "$dir/$name.out" && break; sleep 0.25; done
  printf -v "${name}_pid" %s "$pid"
  printf -v "${name}_addr" %s "$(awk '/^READY/ {print $3}' "$dir/$name.out")"
  printf -v "${name}_metrics" %s "$(awk '/^READY/ {print $5}' "$dir/$name.out")"
}
metric() {  # metric HOST:PORT NAME: the sum of NAME's samples
  curl -s "http://$1/metrics" | awk -v n="$2" '$1 == n || index($1, n "{") == 1 {s += $2} END {print s + 0}'
}
router_for() {  # router_for NAME DECODE_ADDR PREFILL_ADDR
  start "$1" router --decode-workers="$2" --prefill-workers="$3" --disagg-threshold=4 \
    --status-interval-seconds=0.05 --log-level warning
}
generate() {  # generate ROUTER_ADDR: greedy text through the router
  timeout 120 sparseserve generate --server "$1" --prompt "$prompt" --max-tokens 24 \
    --temperature 0 --ignore-eos 2>/dev/null
}
want=$(sparseserve generate "${flags[@]}" --prompt "$prompt" --max-tokens 24 --temperature 0 \
  --ignore-eos 2>/dev/null)

# 1. The decode worker dies mid-PUT.
start decode decode "${flags[@]}"
start prefill prefill "${flags[@]}" --fault-kv-put-delay-ms 1000
router_for router "$decode_addr" "$prefill_addr"
both_direct() {
  grep -q "KV transfer GPU to GPU" "$dir/prefill.err" && grep -q "KV transfer GPU to GPU" "$dir/decode.err"
}
check "GPU to GPU on both workers" both_direct
generate "$router_addr" >"$dir/first.txt" &
gen=$!
sleep 2.5  # stories260K has 5 layers: 1 s after each layer's PUT, the transfer is mid-way
kill -9 "$decode_pid"
wait "$gen"
sleep 1
check "prefill worker alive after its decode peer died mid-PUT" kill -0 "$prefill_pid"
check "prefill worker counted the failed transfer" \
  test "$(metric "$prefill_metrics" sparseserve_kv_transfer_failures_total)" != 0
kill "$router_pid"
start decode2 decode "${flags[@]}"
router_for router2 "$decode2_addr" "$prefill_addr"
sleep 0.5
before=$(metric "$prefill_metrics" sparseserve_kv_transfer_bytes_total)
got=$(generate "$router2_addr")
after=$(metric "$prefill_metrics" sparseserve_kv_transfer_bytes_total)
check "the same prefill worker fills a new decode worker: single-process output" \
  test -n "$want" -a "$got" = "$want"
check "... through a GPU-to-GPU transfer ($before -> $after bytes)" \
  python3 -c "import sys; sys.exit(0 if float(sys.argv[2]) > float(sys.argv[1]) else 1)" \
  "$before" "$after"

# 2. The prefill worker dies mid-PUT: the decode worker serves the request (local prefill) and
# the next one.
generate "$router2_addr" >"$dir/second.txt" &
gen=$!
sleep 2.5
kill -9 "$prefill_pid"
wait "$gen"
check "decode worker alive after its prefill peer died mid-PUT" kill -0 "$decode2_pid"
check "the cut request still gets the single-process output" test "$(cat "$dir/second.txt")" = "$want"
check "the decode worker serves the next request" test "$(generate "$router2_addr")" = "$want"
grep -hE "Assertion|CUDA error|illegal" "$dir"/*.err | head -5
exit $fails
