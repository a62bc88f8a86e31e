#!/usr/bin/env bash
# cli_bench_test.sh SPARSESERVE — `sparseserve bench model` on the CPU backend with the `tiny`
# preset: the table has a positive tokens/s for every case, and bad input fails clearly (exit 2,
# never a crash). Takes a few seconds.
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; fails=$((fails + 1)); }

# The tokens/s of table row `label` in file $2, or "" when the row is missing or skipped.
tokens_per_s() {
  awk -v label="$1" 'index($0, label " ") == 1 { n = split(label, w, " "); print $(n + 1) }' "$2"
}

# 1. A quick run: every case runs and has a positive throughput.
if "$bin" bench model --synthetic tiny --device cpu --prefill-lengths 64,200 \
    --decode-batches 1,4 --decode-contexts 64 --iters 3 --warmup 1 >"$tmp/out" 2>"$tmp/err"; then
  pass "bench model runs"
else
  fail "bench model runs (rc=$?)"; cat "$tmp/err"
fi
for label in "prefill L=64" "prefill L=200" "decode B=1 C=64" "decode B=4 C=64"; do
  tps=$(tokens_per_s "$label" "$tmp/out")
  if [[ "$tps" =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v t="$tps" 'BEGIN { exit !(t > 0) }'; then
    pass "$label: $tps tokens/s"
  else
    fail "$label has no positive tokens/s"; cat "$tmp/out"
  fi
done
grep -q '^bandwidth: .* GB/s (measured' "$tmp/out" && pass "bandwidth measured" ||
  { fail "bandwidth measured"; cat "$tmp/out"; }
grep -q '% roofline' "$tmp/out" && pass "roofline column" || fail "roofline column"
grep -q '^bench: decode B=4 C=64' "$tmp/err" && pass "progress on stderr" || fail "progress on stderr"

# 2. Given peaks, a case beyond the preset's context is a skipped row, not an error.
if "$bin" bench model --synthetic tiny --prefill-lengths 32,5000 --decode-batches 2 \
    --decode-contexts 16 --iters 1 --warmup 0 --peak-bandwidth-gbps 10 --peak-tflops 0.5 \
    >"$tmp/out2" 2>"$tmp/err2" &&
    grep -q '^prefill L=5000 .*skipped: beyond tiny.s context of 4096' "$tmp/out2" &&
    grep -q '^bandwidth: 10.0 GB/s (--peak-bandwidth-gbps)' "$tmp/out2" &&
    grep -Eq '^decode B=2 C=16 +[0-9.]+ .* (memory|compute) ' "$tmp/out2"; then
  pass "skipped row and given peaks"
else
  fail "skipped row and given peaks"; cat "$tmp/out2" "$tmp/err2"
fi

# 3. --help explains the command and lists its flags (and the shared ones it uses, only those).
if "$bin" bench model --help >"$tmp/help"; then
  # --model and the --spec-* flags are bench spec's (a real model, speculative decoding).
  for f in --synthetic --prefill-lengths --decode-batches --decode-contexts --iters --warmup \
           --peak-bandwidth-gbps --peak-tflops --device --block-tokens --prefill-chunk --model \
           --spec-batches --spec-modes --spec-tokens --spec-max-draft --spec-controller; do
    grep -q -- "$f " "$tmp/help" || fail "help lists $f"
  done
  grep -q -- "--decode-workers " "$tmp/help" && fail "help lists serving flags bench does not use"
  grep -q 'roofline' "$tmp/help" && pass "bench --help" || fail "bench --help explains"
else
  fail "bench --help exit code"
fi
"$bin" --help | grep -q '^  bench ' && pass "bench in the command list" || fail "command list"

# 4. Bad input: exit code 2 with a message naming the problem.
expect_usage_error() {  # name pattern args...
  local name=$1 pattern=$2; shift 2
  "$bin" "$@" >"$tmp/o" 2>"$tmp/e"; local rc=$?
  if [ $rc -eq 2 ] && grep -qi -- "$pattern" "$tmp/e"; then pass "$name"
  else fail "$name (rc=$rc)"; cat "$tmp/e"; fi
}
expect_usage_error "unknown preset" \
  "valid presets: llama3-8b, llama3-8b-tp2-rank, llama3-70b-layer, llama3-70b, mistral-7b, qwen2-7b, tiny" \
  bench model --synthetic llama9
expect_usage_error "missing preset" "--synthetic is required" bench model
expect_usage_error "unknown bench target" "valid: model" bench frobnicate --synthetic tiny
expect_usage_error "no bench target" "valid: model" bench
expect_usage_error "bad list" "--decode-batches: 'x'" bench model --synthetic tiny --decode-batches 1,x
expect_usage_error "zero in list" "--prefill-lengths: '0'" bench model --synthetic tiny --prefill-lengths 0
expect_usage_error "bad iters" "--iters" bench model --synthetic tiny --iters 0
expect_usage_error "bad block size" "--block-tokens" bench model --synthetic tiny --block-tokens 24
expect_usage_error "bad device" "device" bench model --synthetic tiny --device tpu

# 5. --device cuda: runs where a GPU backend exists, else fails naming cuda; never crashes.
"$bin" bench model --synthetic tiny --device cuda --prefill-lengths 64 --decode-batches 1 \
  --decode-contexts 64 --iters 1 --warmup 0 >"$tmp/o" 2>"$tmp/e"; rc=$?
if { [ $rc -eq 0 ] && [ -n "$(tokens_per_s "decode B=1 C=64" "$tmp/o")" ]; } ||
   { [ $rc -eq 1 ] && grep -q 'error: .*creating the cuda backend' "$tmp/e"; }; then
  pass "--device cuda (rc=$rc)"
else
  fail "--device cuda (rc=$rc)"; cat "$tmp/e"
fi

[ $fails -eq 0 ] && echo "cli_bench_test: all passed" || echo "cli_bench_test: $fails failed"
exit $((fails > 0))
