#!/usr/bin/env bash
# eval_check.sh OUT_DIR — the long-context accuracy table on the GPU (issue 11), run by
# scripts/gpu_check.sh's `eval` stage: bench/longctx/table.py runs the tasks of tools/longctx at
# 4K-32K (the model's training lengths end at 16K: 32K is 2x) under each config of
# $LONGCTX_TABLE_CONFIGS (default dense,window1024; presets in table.py), one eval per GPU at a
# time; then passkey at 63K (~4x) dense, and transformers on a sample of the dense 4K prompts.
# Prompts per cell: $LONGCTX_EVAL_NUM (default 100; issue 11's table wants >= 200), half that at
# 63K.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:?usage: eval_check.sh OUT_DIR}
model=tests/data/longctx_model
num=${LONGCTX_EVAL_NUM:-100}
tasks=$(mktemp -d)  # the prompts are ~100 MB: kept out of OUT_DIR, which is packed
trap 'rm -rf "$tasks"' EXIT
rc=0
echo "### the table: ${LONGCTX_TABLE_CONFIGS:-dense,window1024}"
python3 bench/longctx/table.py --model $model --num "$num" --out "$out/table" \
  --prompts-dir "$tasks" --configs "${LONGCTX_TABLE_CONFIGS:-dense,window1024}" || rc=1
echo "### dense, passkey at 63K (~4x the training length)"
# 63K: a 64K prompt would leave no room to answer in the 65536 positions of the config.
python3 tools/longctx --tokenizer $model/tokenizer.json --jobs "$(nproc)" --tasks passkey \
  --lengths 63K --num $((num / 2)) --out "$tasks/tasks_64k.jsonl" || exit 1
sparseserve eval --device cuda --model $model --tasks "$tasks/tasks_64k.jsonl" \
  --out "$out/eval_dense_64k.json" 2>>"$out/eval_progress.log" || rc=1
echo "### transformers vs sparseserve (dense) on 20 prompts of each task at 4K"
if [ -f "$out/table/dense_4k.json" ]; then
  python3 - "$out" "$tasks" <<'PY'
import json, sys
out, tasks_dir = sys.argv[1], sys.argv[2]
tasks = [json.loads(l) for l in open(f"{tasks_dir}/tasks_4k.jsonl")]
items = json.load(open(f"{out}/table/dense_4k.json"))["items"]
pick = [i for i, t in enumerate(tasks) if t["seed"] < 20]
with open(f"{tasks_dir}/hf_tasks.jsonl", "w") as f:
    for i in pick:
        f.write(json.dumps(tasks[i]) + "\n")
json.dump({"items": [items[i] for i in pick]}, open(f"{out}/hf_ours.json", "w"))
PY
  python3 bench/longctx/hf_check.py --model $model --tasks "$tasks/hf_tasks.jsonl" \
    --results "$out/hf_ours.json" --num 100 || rc=1
else
  echo "no dense 4K results to compare"; rc=1
fi
exit $rc
