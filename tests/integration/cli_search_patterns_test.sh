#!/usr/bin/env bash
# cli_search_patterns_test.sh SPARSESERVE MODEL — `sparseserve search-patterns` end to end on the
# CPU with stories260K (context 2048): the config it writes has one object per layer with every
# head, loads into `generate --prefill-attention minference`, the tables are printed, and bad
# input fails clearly with exit status 2. Takes a few seconds.
set -uo pipefail
bin=$1 model=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; fails=$((fails + 1)); }

# A sample longer than the model's context (~2300 tokens, cut to 2047: eight chunks of 256).
for i in $(seq 35); do
  echo "Once upon a time, there was a little girl named Lily. She loved to play in the park" \
       "with her dog Max. One day, she found a big red ball under a tree and gave it to Max."
done >"$tmp/sample.txt"

# 1. The search runs and writes a config in MInference's layout.
if "$bin" search-patterns --model "$model" --sample "$tmp/sample.txt" --out "$tmp/config.json" \
    --target-density 0.3 --prefill-chunk 256 >"$tmp/out" 2>"$tmp/err"; then
  pass "search-patterns runs"
else
  fail "search-patterns runs (rc=$?)"; cat "$tmp/err"
fi
grep -q 'cut to the model.s context: 2047' "$tmp/err" && pass "long sample cut to the context" ||
  { fail "long sample cut to the context"; cat "$tmp/err"; }
grep -q 'chunk 8/8, layer' "$tmp/err" && pass "progress per chunk and layer" ||
  { fail "progress per chunk and layer"; cat "$tmp/err"; }
for what in 'est.density%' 'vertical_and_slash(' 'stream_llm(' 'block_sparse(' 'mean err' \
            'the chosen patterns compute'; do
  grep -qF -- "$what" "$tmp/out" || { fail "output shows $what"; cat "$tmp/out"; }
done
if python3 - "$tmp/config.json" <<'EOF'; then pass "config layout"; else fail "config layout"; fi
import json, sys
layers = json.load(open(sys.argv[1]))
assert isinstance(layers, list) and len(layers) >= 1, layers
heads = len(layers[0])
for layer in layers:
    assert sorted(layer, key=int) == [str(h) for h in range(heads)], layer
    for kind, v, s, score in layer.values():
        assert kind in ("vertical_and_slash", "stream_llm", "block_sparse"), kind
        assert v >= 1 and s >= 0 and 0 <= score <= 1.5, (kind, v, s, score)
EOF

# 2. The config loads and runs as MInference prefill patterns.
if "$bin" generate --model "$model" --prompt "$(head -c 1200 "$tmp/sample.txt")" --max-tokens 4 \
    --temperature 0 --prefill-attention minference --sparse-prefill-threshold 0 \
    --minference-config "$tmp/config.json" >"$tmp/o" 2>"$tmp/e"; then
  pass "generate loads the config"
else
  fail "generate loads the config"; cat "$tmp/e"
fi

# 2b. --error-rows scores only the sample's last rows: covering every row equals the default
# search bit for bit; the last 64 rows score differently.
for rows in 100000 64; do
  "$bin" search-patterns --model "$model" --sample "$tmp/sample.txt" --out "$tmp/rows$rows.json" \
    --target-density 0.3 --prefill-chunk 256 --error-rows $rows >/dev/null 2>"$tmp/err" ||
    { fail "search-patterns --error-rows $rows"; cat "$tmp/err"; }
done
cmp -s "$tmp/config.json" "$tmp/rows100000.json" && pass "--error-rows above the sample = every row" ||
  fail "--error-rows above the sample = every row"
cmp -s "$tmp/config.json" "$tmp/rows64.json" && fail "--error-rows 64 changes the scores" ||
  pass "--error-rows 64 changes the scores"

# 3. --help documents the flags and the candidate space.
if "$bin" search-patterns --help >"$tmp/help"; then
  for f in --model --sample --out --target-density --sample-tokens --error-rows --device \
           --prefill-chunk; do
    grep -q -- "$f " "$tmp/help" || fail "help lists $f"
  done
  grep -q 'block_sparse(k)' "$tmp/help" || fail "help describes the candidates"
  pass "search-patterns --help"
else
  fail "search-patterns --help exit code"
fi

# 4. Bad input: a clear message and exit status 2.
expect_usage_error() {  # name pattern args...
  local name=$1 pattern=$2; shift 2
  "$bin" search-patterns "$@" >"$tmp/o" 2>"$tmp/e"; local rc=$?
  if [ $rc -eq 2 ] && grep -qi -- "$pattern" "$tmp/e"; then pass "$name"
  else fail "$name (rc=$rc)"; cat "$tmp/e"; fi
}
echo "Once upon a time." >"$tmp/short.txt"
ok=(--model "$model" --out "$tmp/x.json")
expect_usage_error "missing --sample" "--sample is required" "${ok[@]}"
expect_usage_error "missing --out" "--out is required" --model "$model" --sample "$tmp/sample.txt"
expect_usage_error "unreadable sample" "cannot read --sample" "${ok[@]}" --sample "$tmp/nope.txt"
expect_usage_error "short sample" "too short" "${ok[@]}" --sample "$tmp/short.txt"
expect_usage_error "short --sample-tokens" "too short" "${ok[@]}" --sample "$tmp/sample.txt" \
  --sample-tokens 100
expect_usage_error "zero density" "target-density" "${ok[@]}" --sample "$tmp/sample.txt" \
  --target-density 0
expect_usage_error "density above 1" "target-density" "${ok[@]}" --sample "$tmp/sample.txt" \
  --target-density 1.5
expect_usage_error "negative --sample-tokens" "sample-tokens" "${ok[@]}" \
  --sample "$tmp/sample.txt" --sample-tokens -1
expect_usage_error "negative --error-rows" "error-rows" "${ok[@]}" \
  --sample "$tmp/sample.txt" --error-rows -1
expect_usage_error "missing model" "no such" --model "$tmp/nope.gguf" --out "$tmp/x.json" \
  --sample "$tmp/sample.txt"
expect_usage_error "stray argument" "unexpected argument" "${ok[@]}" --sample "$tmp/sample.txt" extra
[ ! -e "$tmp/x.json" ] && pass "no config written on error" || fail "no config written on error"

[ $fails -eq 0 ] && echo "cli_search_patterns_test: all passed" ||
  echo "cli_search_patterns_test: $fails failed"
exit $((fails > 0))
