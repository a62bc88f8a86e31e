#!/usr/bin/env bash
# minference_check.sh OUT_DIR — MInference's accuracy on the long-context test model (issue 12),
# run by scripts/gpu_check.sh's `minference` stage: the RULER-style tasks of tools/longctx at 8K
# and 16K through `sparseserve eval --device cuda`, dense and under MInference with each config
# of $MINFERENCE_CONFIGS (names: default = vertical-slash (1000, 6096) on every head; vsA_B =
# vertical-slash (A, B) on every head; searched = the committed search-patterns config). Every
# cell prints its measured density. Prompts per cell: $MINFERENCE_EVAL_NUM (default 200).
# --sparse-prefill-threshold 1024 so the 8K prompts run sparse too (the server default is 8192).
# $MINFERENCE_EVAL_FLAGS adds flags to every run (e.g. --prefill-chunk 4096); $MINFERENCE_DENSE=0
# skips the dense run.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:?usage: minference_check.sh OUT_DIR}
model=tests/data/longctx_model
num=${MINFERENCE_EVAL_NUM:-200}
configs=${MINFERENCE_CONFIGS:-vs100_120 searched default}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 tools/longctx --tokenizer $model/tokenizer.json --jobs "$(nproc)" \
  --tasks passkey,multikey,multivalue,vartrack,cwe --lengths 8K,16K --num "$num" \
  --out "$tmp/tasks.jsonl" || exit 1
rc=0
extra=(${MINFERENCE_EVAL_FLAGS:-})
if [ "${MINFERENCE_DENSE:-1}" = 1 ]; then
  echo "### dense ${extra[*]}"
  sparseserve eval --device cuda --model $model --tasks "$tmp/tasks.jsonl" "${extra[@]}" \
    --out "$out/minference_dense.json" 2>>"$out/minference_progress.log" || rc=1
fi
for name in $configs; do
  flags=(--prefill-attention minference --sparse-prefill-threshold 1024)
  case $name in
    default) ;;
    searched)
      [ -f $model/minference_config.json ] || { echo "no searched config"; continue; }
      flags+=(--minference-config $model/minference_config.json) ;;
    vs*)
      IFS=_ read -r v s <<<"${name#vs}"
      python3 - "$v" "$s" "$tmp/$name.json" <<'PY'
import json, sys
v, s, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
cfg = json.load(open("tests/data/longctx_model/config.json"))
heads = cfg["num_attention_heads"]
json.dump([{str(h): ["vertical_and_slash", v, s, 0] for h in range(heads)}
           for _ in range(cfg["num_hidden_layers"])], open(path, "w"))
PY
      flags+=(--minference-config "$tmp/$name.json") ;;
  esac
  echo "### minference $name ${extra[*]}"
  sparseserve eval --device cuda --model $model --tasks "$tmp/tasks.jsonl" "${flags[@]}" "${extra[@]}" \
    --out "$out/minference_$name.json" 2>>"$out/minference_progress.log" || rc=1
done
exit $rc
