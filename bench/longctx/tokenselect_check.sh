#!/usr/bin/env bash
# tokenselect_check.sh OUT_DIR — TokenSelect's accuracy on the long-context test model (issue
# 13), run by scripts/gpu_check.sh's `tokenselect` stage: the RULER-style tasks of tools/longctx
# at 8K and 16K through `sparseserve eval --device cuda`, dense and under each configuration of
# $TOKENSELECT_CONFIGS:
#   decode_K    dense prefill, TokenSelect decode with k = K (the answer's later tokens select);
#   chunked_K   TokenSelect's chunked-prefill variant for the prompt and TokenSelect decode
#               (the paper's setting: every 512-token chunk selects by its mean query), k = K;
#   decode_kvh_K, chunked_kvh_K  the same with one selection per KV head
#               (--tokenselect-per-kv-head, TokenSwift's per-KV-head partial KV), k = K each;
#   any name ending in _lN  with N local tokens instead of 512 (decode_kvh_2048_l1024: within
#               1 point of dense on every task but aggregation at 8K and 16K, bench/RESULTS.md);
# every run with 128 initial tokens and theta $TOKENSELECT_THETA (default 0.9). Each
# cell prints the measured density of the whole request and of the decode, and the selection
# cache's hit rate; a covering budget must reproduce the dense outputs. Prompts per cell: $TOKENSELECT_EVAL_NUM (default 200); $TOKENSELECT_DENSE=0
# skips the dense run; $TOKENSELECT_TASKS / $TOKENSELECT_LENGTHS narrow the grid.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:?usage: tokenselect_check.sh OUT_DIR}
model=tests/data/longctx_model
num=${TOKENSELECT_EVAL_NUM:-200}
configs=${TOKENSELECT_CONFIGS:-chunked_1024 chunked_2048 decode_1024 decode_kvh_2048_l1024}
theta=${TOKENSELECT_THETA:-0.9}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 tools/longctx --tokenizer $model/tokenizer.json --jobs "$(nproc)" \
  --tasks "${TOKENSELECT_TASKS:-passkey,multikey,multivalue,vartrack,cwe}" \
  --lengths "${TOKENSELECT_LENGTHS:-8K,16K}" --num "$num" --out "$tmp/tasks.jsonl" || exit 1
rc=0
if [ "${TOKENSELECT_DENSE:-1}" = 1 ]; then
  echo "### dense"
  sparseserve eval --device cuda --model $model --tasks "$tmp/tasks.jsonl" \
    --out "$out/tokenselect_dense.json" 2>>"$out/tokenselect_progress.log" || rc=1
fi
# A budget covering every prompt (k = 65536) must give exactly the dense outputs, prompt chunks
# and generated tokens alike (the GPU's golden check of TokenSelect).
if [ "${TOKENSELECT_DENSE:-1}" = 1 ]; then
  echo "### tokenselect covering (k 65536) == dense"
  sparseserve eval --device cuda --model $model --tasks "$tmp/tasks.jsonl" \
    --prefill-attention tokenselect --decode-attention tokenselect --tokenselect-k 65536 \
    --out "$out/tokenselect_covering.json" 2>>"$out/tokenselect_progress.log" >/dev/null &&
    python3 - "$out/tokenselect_dense.json" "$out/tokenselect_covering.json" <<'PY' || rc=1
import json, sys
dense, covering = (json.load(open(p))["items"] for p in sys.argv[1:])
same = sum(a.get("output") == b.get("output") for a, b in zip(dense, covering))
print(f"covering == dense: {same} of {len(dense)} outputs identical")
sys.exit(0 if same == len(dense) else 1)
PY
fi
for name in $configs; do
  k=${name#*_}
  k=${k#kvh_}
  local_tokens=512
  case $k in *_l*) local_tokens=${k##*_l} k=${k%_l*} ;; esac
  flags=(--decode-attention tokenselect --tokenselect-k "$k" --tokenselect-local "$local_tokens"
    --tokenselect-theta "$theta")
  case $name in
    *_kvh_*) flags+=(--tokenselect-per-kv-head) ;;
  esac
  case $name in
    chunked_*) flags+=(--prefill-attention tokenselect) ;;
    decode_*) ;;
    *) echo "unknown config $name"; rc=1; continue ;;
  esac
  echo "### tokenselect $name (theta $theta)"
  sparseserve eval --device cuda --model $model --tasks "$tmp/tasks.jsonl" "${flags[@]}" \
    --out "$out/tokenselect_$name.json" 2>>"$out/tokenselect_progress.log" || rc=1
done
exit $rc
