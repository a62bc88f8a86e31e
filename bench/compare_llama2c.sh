#!/usr/bin/env bash
# compare_llama2c.sh LLAMA2C_RUN [THREADS] [STEPS] — greedy stories260K decode speed of
# `sparseserve generate` (CPU backend) vs llama2.c's run.c on the same machine, same prompt,
# same number of tokens, THREADS threads for both (OMP_NUM_THREADS for run.c; build run.c with
# -fopenmp for THREADS > 1). llama2.c is built outside this repository; none of it is committed:
#   git show <llama2.c commit>:run.c > /tmp/run.c && gcc -Ofast -march=native -fopenmp /tmp/run.c -lm -o /tmp/run
# Prints tokens/s of each (median of 5 runs) and the ratio.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run=$1 threads=${2:-1} steps=${3:-256}
mirror=${SPARSESERVE_MODEL_MIRROR:-$root/../shared/models}/stories260K
gguf=$root/models/stories260K/stories260K.gguf
[ -f "$gguf" ] || bash "$root/scripts/fetch_model.sh" >/dev/null
prompt="Once upon a time"
new=$((steps - 5))  # llama2.c counts BOS + 4 prompt tokens inside its steps
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ours=$(for _ in 1 2 3 4 5; do
  "$root/build/bin/sparseserve" generate --model "$gguf" --prompt "$prompt" --temperature 0 \
    --max-tokens "$new" --ignore-eos --threads "$threads" 2>&1 >/dev/null |
    sed -E 's/.*decode: ([0-9.]+) tokens\/s.*/\1/'
done | median)
theirs=$(for _ in 1 2 3 4 5; do
  OMP_NUM_THREADS=$threads "$run" "$mirror/stories260K.bin" -z "$mirror/tok512.bin" -t 0 \
    -n "$steps" -i "$prompt" 2>&1 | sed -nE 's/.*achieved tok\/s: ([0-9.]+).*/\1/p'
done | median)
printf 'threads=%s steps=%s  sparseserve %.0f tok/s  llama2.c %.0f tok/s  ratio %.2f\n' \
  "$threads" "$steps" "$ours" "$theirs" "$(echo "$ours / $theirs" | bc -l)"
