#!/usr/bin/env bash
# window_check.sh OUT_DIR — issue 17 on the GPU: sliding-window models with rolling KV.
#  1. tiny_mistral (a 64-token window on every layer), greedy for 300 tokens after a ~140-token
#     prompt on CUDA with a KV pool of 16 blocks of 16 tokens (rolling KV: the sequence spans 28
#     blocks) must equal the same weights loaded as a Llama with a request sliding window of 64
#     (no sinks) and a roomy pool (every block kept, the window applied as a mask): same kernels,
#     same visible keys, so token for token. Then tiny_mistral and tiny_qwen2_swa (window on one
#     layer of two) on CUDA (bf16) against the CPU reference (f32): the agreeing prefix is
#     printed (random weights: a near-tie may flip).
#  2. the synthetic Mistral-7B decodes at 4K and 64K contexts with its 4K window: the blocks held
#     per sequence (bounded by the window) are printed beside tokens/s, with the synthetic
#     Llama-3-8B at the same contexts as the full-attention peer.
set -uo pipefail
out=${1:?OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
prompt=$(printf 'The router sends long prompts to prefill workers. %.0s' 1 2 3 4 5 6)
pool="--block-tokens 16 --kv-cache-tokens 256 --prefill-chunk 32"
gen() { sparseserve generate --max-tokens 300 --ignore-eos --temperature 0 --log-level warning "$@"; }
status=0

# 1. rolling KV on CUDA == the windowed mask without rolling, same device.
llama=$(mktemp -d)
ln -s "$root/tests/data/tiny_mistral/model.safetensors" "$root/tests/data/tiny_mistral/tokenizer.json" "$llama/"
python3 - "$root/tests/data/tiny_mistral/config.json" "$llama/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["model_type"] = "llama"
c["architectures"] = ["LlamaForCausalLM"]
c.pop("sliding_window", None)
json.dump(c, open(sys.argv[2], "w"))
PY
gen --device cuda --model tests/data/tiny_mistral --prompt "$prompt" $pool >"$out/window_rolling.txt" || status=1
gen --device cuda --model "$llama" --prompt "$prompt" --block-tokens 16 --kv-cache-tokens 4096 \
  --attention sliding-window --sliding-window 64 --sink-tokens 0 >"$out/window_masked.txt" || status=1
if cmp -s "$out/window_rolling.txt" "$out/window_masked.txt"; then
  echo "tiny_mistral CUDA: rolling KV (16-block pool) == windowed mask without rolling: equal"
else
  echo "tiny_mistral CUDA: rolling KV differs from the windowed mask"; status=1
fi
# CUDA (bf16) against the CPU reference (f32): how many characters agree (random weights: a
# near-tie may flip; printed, not asserted).
# tiny_llama (no window) is the yardstick of how soon bf16 flips a random-weight model.
for m in tiny_mistral tiny_qwen2_swa tiny_llama; do
  # Only tiny_mistral rolls; the others keep every block.
  flags=$pool
  [ "$m" != tiny_mistral ] && flags="--block-tokens 16 --kv-cache-tokens 4096 --prefill-chunk 32"
  gen --device cuda --model "tests/data/$m" --prompt "$prompt" $flags >"$out/${m}_cuda.txt" || status=1
  gen --device cpu --model "tests/data/$m" --prompt "$prompt" $flags >"$out/${m}_cpu.txt" || status=1
  python3 - "$out/${m}_cuda.txt" "$out/${m}_cpu.txt" "$m" <<'PY'
import sys
a, b = open(sys.argv[1]).read(), open(sys.argv[2]).read()
n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
print(f"{sys.argv[3]}: CUDA and CPU agree on {n} of {len(b)} characters"
      + (" (equal)" if a == b else ""))
PY
done

# 2. the synthetic Mistral-7B: KV held per sequence at 4K and 64K contexts, vs Llama-3-8B.
for preset in mistral-7b llama3-8b; do
  sparseserve bench model --synthetic "$preset" --device cuda --prefill-lengths "" \
    --decode-batches 1,8 --decode-contexts 4096,65536 --iters 10 || status=1
done
exit $status
