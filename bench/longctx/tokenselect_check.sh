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
# every run with 128 initial tokens and theta $TOKENSELECT_THETA (default 0.9), all through
# bench/longctx/table.py (one eval per GPU at a time; tables and JSON in OUT_DIR/tokenselect). Each
# cell prints the measured density of the whole request and of the decode, and the selection
# cache's hit rate (table.json; each eval's log); a covering budget must reproduce the dense
# outputs. Prompts per cell: $TOKENSELECT_EVAL_NUM (default 200); $TOKENSELECT_DENSE=0
# skips the dense run; $TOKENSELECT_TASKS / $TOKENSELECT_LENGTHS narrow the grid.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:?usage: tokenselect_check.sh OUT_DIR}
model=tests/data/longctx_model
num=${TOKENSELECT_EVAL_NUM:-200}
configs=${TOKENSELECT_CONFIGS:-chunked_1024 chunked_2048 decode_1024 decode_kvh_2048_l1024}
theta=${TOKENSELECT_THETA:-0.9}
lengths=${TOKENSELECT_LENGTHS:-8K,16K}
tmp=$(mktemp -d)  # the prompts: kept out of OUT_DIR, which is packed
trap 'rm -rf "$tmp"' EXIT
rc=0
args=()
# A budget covering every prompt (k = 65536) must give exactly the dense outputs, prompt chunks
# and generated tokens alike (the GPU's golden check of TokenSelect).
[ "${TOKENSELECT_DENSE:-1}" = 1 ] && args+=(--config "dense=" --config
  "covering=--prefill-attention tokenselect --decode-attention tokenselect --tokenselect-k 65536")
for name in $configs; do
  k=${name#*_}
  k=${k#kvh_}
  local_tokens=512
  case $k in *_l*) local_tokens=${k##*_l} k=${k%_l*} ;; esac
  flags="--decode-attention tokenselect --tokenselect-k $k --tokenselect-local $local_tokens"
  flags+=" --tokenselect-theta $theta"
  case $name in *_kvh_*) flags+=" --tokenselect-per-kv-head" ;; esac
  case $name in
    chunked_*) flags+=" --prefill-attention tokenselect" ;;
    decode_*) ;;
    *) echo "unknown config $name"; rc=1; continue ;;
  esac
  args+=(--config "$name=$flags")
done
[ ${#args[@]} -gt 0 ] || { echo "no configs"; exit 1; }
python3 bench/longctx/table.py --model $model --num "$num" --lengths "$lengths" \
  --tasks "${TOKENSELECT_TASKS:-passkey,multikey,multivalue,vartrack,cwe}" --configs "" \
  --out "$out/tokenselect" --prompts-dir "$tmp" "${args[@]}" || rc=1
if [ "${TOKENSELECT_DENSE:-1}" = 1 ]; then
  echo "### tokenselect covering (k 65536) == dense"
  python3 - "$out/tokenselect" "$lengths" <<'PY' || rc=1
import json, sys
sys.path.insert(0, "tools")
from longctx.__main__ import parse_length
same = total = 0
for length in sys.argv[2].split(","):
    k = parse_length(length) // 1024
    dense, covering = (json.load(open(f"{sys.argv[1]}/{name}_{k}k.json"))["items"]
                       for name in ("dense", "covering"))
    same += sum(a.get("output") == b.get("output") for a, b in zip(dense, covering))
    total += len(dense)
print(f"covering == dense: {same} of {total} outputs identical")
sys.exit(0 if same == total else 1)
PY
fi
exit $rc
