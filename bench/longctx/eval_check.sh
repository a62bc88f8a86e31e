#!/usr/bin/env bash
# eval_check.sh OUT_DIR — the long-context accuracy table on the GPU (issue 11), run by
# scripts/gpu_check.sh's `eval` stage: tasks from tools/longctx at 4K-32K (the model's training
# lengths end at 16K: 32K is 2x) plus passkey at 63K (~4x), through `sparseserve eval --device
# cuda` dense and with a 1024-token sliding window, then transformers on a sample of the dense
# prompts. Prompts per cell: $LONGCTX_EVAL_NUM (default 100), half that for the window.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:?usage: eval_check.sh OUT_DIR}
model=tests/data/longctx_model
num=${LONGCTX_EVAL_NUM:-100}
jobs=$(nproc)
tasks=$(mktemp -d)  # the prompts are ~100 MB: kept out of OUT_DIR, which is packed
trap 'rm -rf "$tasks"' EXIT
gen() { python3 tools/longctx --tokenizer $model/tokenizer.json --jobs "$jobs" "$@"; }
rc=0
gen --tasks passkey,multikey,multivalue,vartrack,cwe --lengths 4K,8K,16K,32K --num "$num" \
  --out "$tasks/tasks.jsonl" || exit 1
gen --tasks passkey,multikey,multivalue,vartrack,cwe --lengths 4K,8K,16K,32K \
  --num $((num / 2)) --out "$tasks/tasks_half.jsonl" || exit 1
# 63K: a 64K prompt would leave no room to answer in the 65536 positions of the config.
gen --tasks passkey --lengths 63K --num $((num / 2)) --out "$tasks/tasks_64k.jsonl" || exit 1
echo "### dense"
sparseserve eval --device cuda --model $model --tasks "$tasks/tasks.jsonl" \
  --out "$out/eval_dense.json" 2>>"$out/eval_progress.log" || rc=1
echo "### dense, passkey at 63K (~4x the training length)"
sparseserve eval --device cuda --model $model --tasks "$tasks/tasks_64k.jsonl" \
  --out "$out/eval_dense_64k.json" 2>>"$out/eval_progress.log" || rc=1
echo "### sliding-window 1024 (4 sinks), prefill and decode"
sparseserve eval --device cuda --model $model --tasks "$tasks/tasks_half.jsonl" \
  --attention sliding-window --sliding-window 1024 --out "$out/eval_window.json" 2>>"$out/eval_progress.log" || rc=1
echo "### transformers vs sparseserve (dense) on 20 prompts of each task at 4K"
python3 - "$out" "$tasks" <<'PY'
import json, sys
out, tasks_dir = sys.argv[1], sys.argv[2]
tasks = [json.loads(l) for l in open(f"{tasks_dir}/tasks.jsonl")]
items = json.load(open(f"{out}/eval_dense.json"))["items"]
pick = [i for i, t in enumerate(tasks) if t["length"] == 4096 and t["seed"] < 20]
with open(f"{tasks_dir}/hf_tasks.jsonl", "w") as f:
    for i in pick:
        f.write(json.dumps(tasks[i]) + "\n")
json.dump({"items": [items[i] for i in pick]}, open(f"{out}/hf_ours.json", "w"))
PY
python3 bench/longctx/hf_check.py --model $model --tasks "$tasks/hf_tasks.jsonl" \
  --results "$out/hf_ours.json" --num 100 || rc=1
exit $rc
