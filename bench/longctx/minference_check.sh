#!/usr/bin/env bash
# minference_check.sh OUT_DIR — MInference's accuracy on the long-context test model (issue 12),
# run by scripts/gpu_check.sh's `minference` stage: the RULER-style tasks of tools/longctx at 8K
# and 16K through `sparseserve eval --device cuda`, dense and under MInference with each config
# of $MINFERENCE_CONFIGS (names: default = vertical-slash (1000, 6096) on every head; vsA_B =
# vertical-slash (A, B) on every head; searched = the committed search-patterns config). Every
# cell prints its measured density; all through bench/longctx/table.py (one eval per GPU at a time;
# tables and JSON in OUT_DIR/minference). Prompts per cell: $MINFERENCE_EVAL_NUM (default 200).
# --sparse-prefill-threshold 1024 so the 8K prompts run sparse too (the server default is 8192).
# $MINFERENCE_EVAL_FLAGS adds flags to every run (e.g. --prefill-chunk 4096); $MINFERENCE_DENSE=0
# skips the dense run; $MINFERENCE_TASKS / $MINFERENCE_LENGTHS narrow the grid.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:?usage: minference_check.sh OUT_DIR}
model=tests/data/longctx_model
num=${MINFERENCE_EVAL_NUM:-200}
configs=${MINFERENCE_CONFIGS:-vs100_120 searched default}
extra=${MINFERENCE_EVAL_FLAGS:-}
tmp=$(mktemp -d)  # the prompts and generated configs: kept out of OUT_DIR, which is packed
trap 'rm -rf "$tmp"' EXIT
rc=0
args=()
[ "${MINFERENCE_DENSE:-1}" = 1 ] && args+=(--config "dense=$extra")
for name in $configs; do
  flags="--prefill-attention minference --sparse-prefill-threshold 1024 $extra"
  case $name in
    default) ;;
    searched)
      [ -f $model/minference_config.json ] || { echo "no searched config"; continue; }
      flags+=" --minference-config $model/minference_config.json" ;;
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
      flags+=" --minference-config $tmp/$name.json" ;;
    *) echo "unknown config $name"; rc=1; continue ;;
  esac
  args+=(--config "$name=$flags")
done
[ ${#args[@]} -gt 0 ] || { echo "no configs"; exit 1; }
python3 bench/longctx/table.py --model $model --num "$num" \
  --lengths "${MINFERENCE_LENGTHS:-8K,16K}" \
  --tasks "${MINFERENCE_TASKS:-passkey,multikey,multivalue,vartrack,cwe}" --configs "" \
  --out "$out/minference" --prompts-dir "$tmp" "${args[@]}" || rc=1
exit $rc
