#!/usr/bin/env bash
# spec_check.sh OUT_DIR — speculative decoding on the long-context test model's long-generation
# task (issue 14), run by scripts/gpu_check.sh's `spec_eval` stage: tools/longctx's `longgen`
# (continue a story for $SPEC_GEN_TOKENS tokens, default 4096) at $SPEC_LENGTHS (default 4K)
# through `sparseserve eval --device cuda`, plainly and under each speculation method of
# $SPEC_METHODS (default prompt-lookup, lookahead and sparse-self, issue 15, with its default
# draft attention: TokenSelect over 16 sinks + 256 recent + 768 selected tokens; and
# sparse-self-window, the same with a sliding-window draft; tokenswift without draft heads and
# tokenswift-heads with the model's trained heads, tokenswift-nopass with them and no draft pass
# (the heads read the verification step's row); kangaroo with its trained early-exit adapter,
# tests/data/spec_adapters), with the controller and at a fixed
# draft length. Each run prints decode tokens/s, steps compression
# (tok/step) and accepted draft share; every run's outputs must equal plain greedy decoding's
# (printed per method: outputs equal / differ, with the first differing token position).
# Prompts: $SPEC_EVAL_NUM (default 8). $SPEC_CONTROLLERS (default "true false") picks the
# controller settings, $SPEC_EXTRA_FLAGS adds flags to every speculative run.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:?usage: spec_check.sh OUT_DIR}
mkdir -p "$out" || exit 1
model=tests/data/longctx_model
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 tools/longctx --tokenizer $model/tokenizer.json --jobs "$(nproc)" --tasks longgen \
  --lengths "${SPEC_LENGTHS:-4K}" --num "${SPEC_EVAL_NUM:-8}" \
  --gen-tokens "${SPEC_GEN_TOKENS:-4096}" --out "$tmp/tasks.jsonl" || exit 1
rc=0
echo "### plain"
sparseserve eval --device cuda --model $model --tasks "$tmp/tasks.jsonl" \
  --out "$out/spec_plain.json" 2>>"$out/spec_progress.log" || rc=1
methods="prompt-lookup lookahead sparse-self sparse-self-window tokenswift tokenswift-heads kangaroo"
adapters=tests/data/spec_adapters
for method in ${SPEC_METHODS:-$methods}; do
  # sparse-self-window: sparse-self drafting with a sliding window (16 sinks + 256 recent keys).
  flags=(--spec "$method")
  [ "$method" = sparse-self-window ] &&
    flags=(--spec sparse-self --sparse-self-attention sliding-window)
  [ "$method" = tokenswift-heads ] &&
    flags=(--spec tokenswift --tokenswift-heads $adapters/longctx_model_tokenswift.safetensors)
  [ "$method" = tokenswift-nopass ] &&
    flags=(--spec tokenswift --tokenswift-heads $adapters/longctx_model_tokenswift.safetensors
      --tokenswift-draft-pass=false)
  [ "$method" = kangaroo ] &&
    flags=(--spec kangaroo --kangaroo-adapter $adapters/longctx_model_kangaroo.safetensors)
  for controller in ${SPEC_CONTROLLERS:-true false}; do
    name="spec_${method}_controller_$controller"
    echo "### $method, controller $controller"
    sparseserve eval --device cuda --model $model --tasks "$tmp/tasks.jsonl" "${flags[@]}" \
      ${SPEC_EXTRA_FLAGS:-} \
      --spec-controller=$controller --out "$out/$name.json" 2>>"$out/spec_progress.log" || rc=1
    python3 - "$out/spec_plain.json" "$out/$name.json" <<'PY' || rc=1
import json, sys
plain, spec = (json.load(open(p))["items"] for p in sys.argv[1:3])
differ = [(i, next((k for k, (a, b) in enumerate(zip(p["output"], s["output"])) if a != b),
                   min(len(p["output"]), len(s["output"]))))
          for i, (p, s) in enumerate(zip(plain, spec)) if p.get("output") != s.get("output")]
print(f"outputs equal to plain: {len(plain) - len(differ)} of {len(plain)}" +
      (f"; differ at (prompt, char) {differ}" if differ else ""))
PY
  done
done
exit $rc
