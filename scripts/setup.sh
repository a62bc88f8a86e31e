#!/usr/bin/env bash
# The first command of the README: install dependencies, build, fetch the default model and run
# the main job on it — greedy generation with stories260K, first in one process, then through
# the services (`sparseserve up`: router + prefill + decode workers, KV over UCX).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/deps.sh
bash scripts/build.sh build
bash scripts/fetch_model.sh
model=models/stories260K/stories260K.gguf
echo "--- sparseserve generate (one process, stories260K, greedy) ---"
./build/bin/sparseserve generate --model "$model" --prompt "Once upon a time" --max-tokens 60 \
  --temperature 0
echo "--- sparseserve up + generate --server (router, 1 prefill, 1 decode worker) ---"
out=$(mktemp)
./build/bin/sparseserve up --model "$model" --num-prefill 1 --num-decode 1 \
  --disagg-threshold 4 --log-level warning >"$out" &
up_pid=$!
trap 'kill -TERM $up_pid 2>/dev/null; wait $up_pid 2>/dev/null; rm -f "$out"' EXIT
for _ in $(seq 1 600); do grep -q '^READY' "$out" && break; sleep 0.1; done
grep '^WORKER\|^READY' "$out"
address=$(awk '/^READY/ {print $3}' "$out")
[ -n "$address" ] || { echo "sparseserve up did not start" >&2; exit 1; }
./build/bin/sparseserve generate --server "$address" --prompt "Once upon a time" \
  --max-tokens 60 --temperature 0
