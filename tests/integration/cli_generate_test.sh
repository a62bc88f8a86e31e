#!/usr/bin/env bash
# cli_generate_test.sh SPARSESERVE MODEL DATA_DIR — the `generate` command end to end:
# the llama2.c golden continuation, --help, and clear errors (non-zero exit) on bad input.
set -uo pipefail
bin=$1 model=$2 data=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; fails=$((fails + 1)); }

# 1. Golden: greedy stories260K = llama2.c run.c reference (60 new tokens after the prompt).
if "$bin" generate --model "$model" --prompt "Once upon a time" --max-tokens 60 \
    --temperature 0 >"$tmp/out" 2>"$tmp/err" && cmp -s "$tmp/out" "$data/golden_once_upon_a_time.txt"; then
  pass "golden continuation"
else
  fail "golden continuation"; echo "--- got:"; cat "$tmp/out"; echo "--- stderr:"; cat "$tmp/err"
fi
grep -q 'prompt tokens: 5 (cached 0), new tokens: 60' "$tmp/err" && pass "summary line" ||
  { fail "summary line"; cat "$tmp/err"; }

# 2. Seeded sampling is reproducible; a different seed changes the output.
run_seed() { "$bin" generate --model "$model" --prompt "Once upon a time" --max-tokens 40 \
  --temperature 1 --top-p 0.9 --seed "$1" 2>/dev/null; }
a=$(run_seed 7); b=$(run_seed 7); c=$(run_seed 8)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "same seed, same output" || fail "same seed, same output"
[ "$a" != "$c" ] && pass "different seed, different output" || fail "different seed"

# 2b. The shadow-dense monitor (issue 11): every sliding-window step shadowed at rate 1; a window
# covering the context measures exactly 0, a 4-token one more (proof it can fail); rate 0 and
# dense requests report nothing; the tokens are those of a run without the monitor.
shadow() { "$bin" generate --model "$model" --prompt "Once upon a time" --max-tokens 20 \
  --temperature 0 --attention sliding-window --sink-tokens 0 "$@"; }
plain=$(shadow --sliding-window 4096 2>/dev/null)
wide=$(shadow --sliding-window 4096 --shadow-dense-rate 1 2>"$tmp/shadow_wide")
shadow --sliding-window 4 --shadow-dense-rate 1 >/dev/null 2>"$tmp/shadow_narrow"
shadow --sliding-window 4 --shadow-dense-rate 0 >/dev/null 2>"$tmp/shadow_off"
"$bin" generate --model "$model" --prompt "Once upon a time" --max-tokens 20 --temperature 0 \
  --shadow-dense-rate 1 >/dev/null 2>"$tmp/shadow_dense"
[ -n "$plain" ] && [ "$plain" = "$wide" ] && pass "shadow monitor leaves the tokens alone" ||
  fail "shadow monitor leaves the tokens alone"
grep -Eq 'shadow-dense: sliding-window, [1-9][0-9]* calls shadowed, .* mean 0, max 0$' \
  "$tmp/shadow_wide" && pass "shadow: covering window measures 0" ||
  { fail "shadow: covering window measures 0"; cat "$tmp/shadow_wide"; }
if grep -Eq 'shadow-dense: sliding-window, [1-9][0-9]* calls shadowed, .* max ([1-9]|0\.[0-9]*[1-9])' \
    "$tmp/shadow_narrow"; then pass "shadow: a short window measures > 0"
else fail "shadow: a short window measures > 0"; cat "$tmp/shadow_narrow"; fi
! grep -q 'shadow-dense' "$tmp/shadow_off" && pass "shadow: rate 0 reports nothing" ||
  fail "shadow: rate 0 reports nothing"
grep -q 'shadow-dense: no sparse attention call was shadowed' "$tmp/shadow_dense" &&
  pass "shadow: dense is never shadowed" || { fail "shadow: dense is never shadowed"; cat "$tmp/shadow_dense"; }

# 2c. MInference (issue 12): forced on at covering budgets (the default VS(1000, 6096) covers the
# 512-token context) it gives the golden output; a small per-head config on a long prompt does
# less than dense attention (density < 1) and still generates; bad flags fail clearly.
if "$bin" generate --model "$model" --prompt "Once upon a time" --max-tokens 60 --temperature 0 \
    --prefill-attention minference --sparse-prefill-threshold 0 >"$tmp/minf" 2>"$tmp/minf_err" &&
    cmp -s "$tmp/minf" "$data/golden_once_upon_a_time.txt"; then
  pass "minference at covering budgets = golden"
else
  fail "minference at covering budgets = golden"; cat "$tmp/minf" "$tmp/minf_err"
fi
python3 - "$tmp/minf.json" <<'PY'
import json, sys
# stories260K: 5 layers, 8 query heads; A-shape, vertical-slash and block-sparse by head.
kinds = [["stream_llm", 4, 32, 0], ["vertical_and_slash", 30, 100, 0], ["block_sparse", 2, 0, 0]]
json.dump([{str(h): kinds[h % 3] for h in range(8)} for _ in range(5)], open(sys.argv[1], "w"))
PY
long_prompt=$(printf 'Once upon a time there was a little girl named Lily. %.0s' $(seq 30))
if "$bin" generate --model "$model" --prompt "$long_prompt" --max-tokens 10 --temperature 0 \
    --prefill-attention minference --sparse-prefill-threshold 0 --prefill-chunk 128 \
    --minference-config "$tmp/minf.json" >"$tmp/minf_long" 2>"$tmp/minf_long_err" &&
    awk '/prefill attention density:/ { exit !($4 > 0 && $4 < 0.8) }' "$tmp/minf_long_err"; then
  pass "minference with a small config is sparse"
else
  fail "minference with a small config is sparse"; cat "$tmp/minf_long_err"
fi
"$bin" generate --model "$model" --prompt hi --prefill-attention minference \
  --minference-config "$tmp/missing.json" >/dev/null 2>"$tmp/minf_bad"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "missing.json" "$tmp/minf_bad" &&
  pass "missing minference config is a clear error" || { fail "missing minference config"; cat "$tmp/minf_bad"; }
"$bin" generate --model "$model" --prompt hi --minference-index guessed >/dev/null 2>"$tmp/minf_bad"
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "minference-index" "$tmp/minf_bad" &&
  pass "bad --minference-index is a clear error" || { fail "bad --minference-index"; cat "$tmp/minf_bad"; }

# 3. --help explains every flag and exits 0.
if "$bin" generate --help >"$tmp/help"; then
  for f in --model --prompt --max-tokens --temperature --top-k --top-p --min-p \
           --repetition-penalty --penalty-window --seed --device; do
    grep -q -- "$f " "$tmp/help" || fail "help lists $f"
  done
  pass "generate --help"
else
  fail "generate --help exit code"
fi
"$bin" --help >/dev/null && pass "top-level --help" || fail "top-level --help"

# 4. Bad input: clear error on stderr, non-zero exit, never a crash (exit code < 128).
expect_error() {  # name pattern args...
  local name=$1 pattern=$2; shift 2
  "$bin" "$@" >"$tmp/o" 2>"$tmp/e"; local rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -qi -- "$pattern" "$tmp/e"; then pass "$name"
  else fail "$name (rc=$rc)"; cat "$tmp/e"; fi
}
head -c 3000 "$model" >"$tmp/truncated.gguf"
printf 'GGUF\x03\x00\x00\x00garbage' >"$tmp/garbage.gguf"
: >"$tmp/empty.gguf"
expect_error "missing model" "no such" generate --model "$tmp/nope.gguf" --prompt hi
expect_error "truncated gguf" "truncated.gguf" generate --model "$tmp/truncated.gguf" --prompt hi
expect_error "garbage gguf" "garbage.gguf" generate --model "$tmp/garbage.gguf" --prompt hi
expect_error "empty gguf" "empty.gguf" generate --model "$tmp/empty.gguf" --prompt hi
expect_error "empty prompt" "prompt" generate --model "$model" --prompt ""
expect_error "negative temperature" "temperature" generate --model "$model" --prompt hi --temperature -1
expect_error "top-p out of range" "top_p" generate --model "$model" --prompt hi --top-p 1.5
expect_error "zero max tokens" "max_tokens" generate --model "$model" --prompt hi --max-tokens 0
expect_error "bad device" "device" generate --model "$model" --prompt hi --device tpu
expect_error "unknown flag" "unknown" generate --model "$model" --prompt hi --no-such-flag 1
expect_error "unknown command" "unknown command" frobnicate
expect_error "prefill worker max running" "max-running" prefill --model "$model" --max-running 0
"$bin" prefill --help >"$tmp/o" 2>&1
if grep -q -- "--max-running" "$tmp/o"; then
  pass "prefill --help lists --max-running"
else fail "prefill --help lists --max-running"; fi

# 5. Hugging Face directories: the tiny checkpoint generates; broken files fail naming the file.
hf=$tmp/hf
cp -r "$data/tiny_llama" "$hf"
if "$bin" generate --model "$hf" --prompt "The router" --max-tokens 8 --temperature 0 \
    >"$tmp/o" 2>"$tmp/e" && grep -q 'new tokens: 8' "$tmp/e"; then pass "hf directory generates"
else fail "hf directory generates"; cat "$tmp/e"; fi
cp -r "$hf" "$tmp/bad_config"; echo '{"model_type": "llama", "hidden_size": "wide"' >"$tmp/bad_config/config.json"
expect_error "malformed config.json" "config.json" generate --model "$tmp/bad_config" --prompt hi
cp -r "$hf" "$tmp/bad_st"; head -c 5000 "$hf/model.safetensors" >"$tmp/bad_st/model.safetensors"
expect_error "truncated safetensors" "model.safetensors" generate --model "$tmp/bad_st" --prompt hi
cp -r "$hf" "$tmp/bad_hdr"; printf '\xff\xff\xff\xff\xff\xff\xff\x7f{}' >"$tmp/bad_hdr/model.safetensors"
expect_error "safetensors header length" "model.safetensors" generate --model "$tmp/bad_hdr" --prompt hi
cp -r "$hf" "$tmp/bad_tok"; head -c 300 "$hf/tokenizer.json" >"$tmp/bad_tok/tokenizer.json"
expect_error "truncated tokenizer.json" "tokenizer.json" generate --model "$tmp/bad_tok" --prompt hi


# Speculative decoding (issue 14): `generate --spec` prints the same text as plain decoding and
# its speculation line; `bench spec` checks exactness in its last column.
"$bin" generate --model "$model" --prompt "Once upon a time" --max-tokens 120 --temperature 0 \
  --spec prompt-lookup --spec-controller=false >"$tmp/spec" 2>"$tmp/spec_err"
"$bin" generate --model "$model" --prompt "Once upon a time" --max-tokens 120 --temperature 0 \
  >"$tmp/plain" 2>/dev/null
if cmp -s "$tmp/spec" "$tmp/plain" && grep -q 'speculation (prompt-lookup): .* accepted' "$tmp/spec_err"; then
  pass "generate --spec prompt-lookup = plain"
else
  fail "generate --spec prompt-lookup = plain"; cat "$tmp/spec_err"
fi
# sparse-self (issue 15): the model drafts with TokenSelect over 36 keys and verifies dense.
"$bin" generate --model "$model" --prompt "Once upon a time" --max-tokens 120 --temperature 0 \
  --spec sparse-self --spec-controller=false --sparse-self-sinks 4 --sparse-self-window 16 \
  --sparse-self-k 16 >"$tmp/self" 2>"$tmp/self_err"
if cmp -s "$tmp/self" "$tmp/plain" && grep -q 'speculation (sparse-self): .* accepted' "$tmp/self_err"; then
  pass "generate --spec sparse-self = plain"
else
  fail "generate --spec sparse-self = plain"; cat "$tmp/self_err"
fi
expect_error "sparse-self with a sparse decode" "decode attention must be dense" generate \
  --model "$model" --prompt hi --spec sparse-self --decode-attention tokenselect
expect_error "sparse-self draft k above --tokenselect-k" "--tokenselect-k" generate \
  --model "$model" --prompt hi --spec sparse-self --sparse-self-k 4096
# tokenswift (issue 15): one draft pass with the trained heads, a tree of candidates verified.
heads=$data/spec_adapters/s260k_tokenswift.safetensors
"$bin" generate --model "$model" --prompt "Once upon a time" --max-tokens 120 --temperature 0 \
  --spec tokenswift --spec-controller=false --tokenswift-heads "$heads" --sparse-self-sinks 4 \
  --sparse-self-window 16 --sparse-self-k 16 --tokenswift-ngram-lag 16 >"$tmp/swift" 2>"$tmp/swift_err"
if cmp -s "$tmp/swift" "$tmp/plain" && grep -q 'speculation (tokenswift): .* accepted' "$tmp/swift_err"; then
  pass "generate --spec tokenswift = plain"
else
  fail "generate --spec tokenswift = plain"; cat "$tmp/swift_err"
fi
expect_error "tokenswift heads of another model" "heads.0.norm.weight" generate --model "$model" \
  --prompt hi --spec tokenswift --tokenswift-heads "$data/spec_adapters/longctx_model_tokenswift.safetensors"
expect_error "tokenswift heads file missing" "nope.safetensors" generate --model "$model" \
  --prompt hi --spec tokenswift --tokenswift-heads "$tmp/nope.safetensors"
expect_error "tokenswift tree" "tokenswift tree" generate --model "$model" --prompt hi \
  --spec tokenswift --tokenswift-tree 2,3
if "$bin" bench spec --model "$model" --spec-batches 3 --spec-tokens 60 \
     --spec-modes prompt-lookup,lookahead,sparse-self,tokenswift,oracle:0.5 --lookahead-window 4 \
     --sparse-self-window 16 --sparse-self-k 16 --tokenswift-heads "$heads" >"$tmp/bench" 2>/dev/null &&
   [ "$(grep -c '| = plain |$' "$tmp/bench")" -eq 5 ]; then
  pass "bench spec: every mode = plain"
else
  fail "bench spec: every mode = plain"; cat "$tmp/bench"
fi

[ $fails -eq 0 ] && echo "cli_generate_test: all passed" || echo "cli_generate_test: $fails failed"
exit $((fails > 0))
