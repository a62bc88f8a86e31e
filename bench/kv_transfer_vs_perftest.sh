#!/usr/bin/env bash
# kv_transfer_vs_perftest.sh [UCX_TLS] [TOTAL_MIB] [ROUNDS] [MEMORY] — KV transfer throughput of
# kv_transfer_bench (two processes, Llama-3-8B layout: 32 layers x 256 blocks x 256 KiB, scattered
# 256 KiB PUTs layer by layer, one flush) vs UCX's own ucx_perftest ucp_put_bw with 256 KiB
# messages, same transports, same machine, alternating ROUNDS times; prints the best of each and
# the ratio. Defaults: tcp,self, 2048 MiB, 3 rounds, MEMORY host. MEMORY cuda puts both ends in
# GPU memory (GPU to GPU over UCX's CUDA transports, issue 20 item 2; perftest with -m cuda,cuda).
# Set KV_TRANSFER_BENCH to pick the binary (default build/bin/kv_transfer_bench, else the PATH's).
# Note: perftest PUTs one 256 KiB buffer over and over (cache-resident on both sides); the bench
# moves TOTAL_MIB of distinct memory, as a real KV transfer does. So for transports without tcp
# (where the copy is the whole cost) a memory-bound perftest figure is printed too: 64 MiB
# messages x 32 = 2 GiB through buffers far larger than the caches. (ucx_perftest 1.13 over tcp
# fails or crawls with messages that large, so tcp gets only the 256 KiB figure.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=${KV_TRANSFER_BENCH:-$root/build/bin/kv_transfer_bench}
[ -x "$bench" ] || bench=$(command -v kv_transfer_bench)  # a GPU machine's .devbundle/bin
tls=${1:-tcp,self} total=${2:-2048} rounds=${3:-3} memory=${4:-host}
export UCX_TLS=$tls
memtype=()
[ "$memory" = cuda ] && memtype=(-m cuda,cuda)

# perftest_gbps SIZE ITERS: ucx_perftest ucp_put_bw overall bandwidth in GB/s (it reports MiB/s).
perftest_gbps() {
  local size=$1 iters=$2 port=$((20000 + RANDOM % 20000)) out="" server
  timeout 120 ucx_perftest -p "$port" -t ucp_put_bw -s "$size" -n "$iters" "${memtype[@]}" \
    >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 50); do  # the server needs a moment to listen; bounded retries
    if out=$(timeout 120 ucx_perftest localhost -p "$port" -t ucp_put_bw -s "$size" -n "$iters" \
               "${memtype[@]}" 2>/dev/null); then
      break
    fi
    sleep 0.2
  done
  wait "$server" || true
  echo "$out" | awk '/^Final:/ { printf "%.3f\n", $7 * 1048576 / 1e9 }'
}

bench_gbps() {
  "$bench" --transports="$tls" --total_mib="$total" --source_memory="$memory" \
    --target_memory="$memory" 2>/dev/null |
    sed -nE 's/^RESULT kv_transfer_gbps=([0-9.]+)$/\1/p'
}

max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b ? a : b) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { print (b > 0 ? a / b : 0) }'; }
big=0
case $tls in *tcp*) big=0 ;; *) big=1 ;; esac
[ "$memory" = cuda ] && big=1  # GPU memory moves over cuda_ipc even when tcp is listed
best_ours=0 best_theirs=0 best_big=0
for round in $(seq "$rounds"); do
  ours=$(bench_gbps)
  theirs=$(perftest_gbps 262144 2000)
  [ -n "$ours" ] && [ -n "$theirs" ] || { echo "round $round: a run failed" >&2; exit 1; }
  line="round $round: kv_transfer_bench $ours GB/s, ucx_perftest 256 KiB $theirs GB/s"
  best_ours=$(max "$ours" "$best_ours")
  best_theirs=$(max "$theirs" "$best_theirs")
  if [ "$big" = 1 ]; then
    big_gbps=$(perftest_gbps 67108864 32)
    [ -n "$big_gbps" ] || { echo "round $round: perftest 64 MiB failed" >&2; exit 1; }
    line="$line, ucx_perftest 64 MiB $big_gbps GB/s"
    best_big=$(max "$big_gbps" "$best_big")
  fi
  echo "$line"
done
printf 'UCX_TLS=%s memory=%s total=%s MiB, best of %s: kv_transfer_bench %.2f GB/s | ucx_perftest ucp_put_bw 256 KiB %.2f GB/s, ratio %.2f' \
  "$tls" "$memory" "$total" "$rounds" "$best_ours" "$best_theirs" "$(ratio "$best_ours" "$best_theirs")"
if [ "$big" = 1 ]; then
  printf ' | 64 MiB %.2f GB/s, ratio %.2f' "$best_big" "$(ratio "$best_ours" "$best_big")"
fi
echo
