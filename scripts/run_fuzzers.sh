#!/usr/bin/env bash
# run_fuzzers.sh BUILD_DIR SECONDS — runs every libFuzzer target in BUILD_DIR/bin for SECONDS
# each, two at a time, seeded from tests/fuzz/corpus/<target>/ and the test model. Prints
# "ok <target>" or "FAIL <target>" per target; exits non-zero on any finding.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$1 secs=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
targets=$(find "$dir/bin" -maxdepth 1 -name '*_fuzz' -type f -executable | sort)
[ -n "$targets" ] || { echo "FAIL no fuzz targets in $dir/bin"; exit 1; }
run_one() {
  local bin=$1 name corpus
  name=$(basename "$bin")
  corpus=$work/$name
  mkdir -p "$corpus"
  [ -d "$root/tests/fuzz/corpus/$name" ] && cp -r "$root/tests/fuzz/corpus/$name/." "$corpus/"
  case $name in  # real files as seeds (libFuzzer reads at most -max_len bytes of each)
    gguf*) cp "$root/models/stories260K/stories260K.gguf" "$corpus/" 2>/dev/null ;;
    safetensors*) cp "$root/tests/data/tiny_qwen2/model.safetensors" "$corpus/" ;;
    hf_config*) cp "$root/tests/data/tiny_llama/config.json" "$corpus/llama.json"
                cp "$root/tests/data/tiny_qwen2/config.json" "$corpus/qwen2.json" ;;
    tokenizer_json*) for f in "$root"/tests/data/tokenizers/*_style.json \
                       "$root"/tests/data/tiny_*/tokenizer.json; do
                       cp "$f" "$corpus/$(basename "$(dirname "$f")")-$(basename "$f")"; done ;;
  esac
  if "$bin" -max_total_time="$secs" -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix="$work/$name-" "$corpus" >"$work/$name.log" 2>&1; then
    echo "ok $name"
  else
    echo "FAIL $name"; tail -n 40 "$work/$name.log"
  fi
}
export -f run_one
export work secs root
printf '%s\n' $targets | xargs -P 2 -I{} bash -c 'run_one {}' | tee "$work/summary"
! grep -q '^FAIL' "$work/summary"
