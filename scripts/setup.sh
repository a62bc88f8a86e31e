#!/usr/bin/env bash
# The first command of the README: install dependencies, build, fetch the default model and run
# the main job on it (greedy generation with stories260K).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/deps.sh
bash scripts/build.sh build
bash scripts/fetch_model.sh
echo "--- sparseserve generate (stories260K, greedy) ---"
./build/bin/sparseserve generate --model models/stories260K/stories260K.gguf \
  --prompt "Once upon a time" --max-tokens 60 --temperature 0
