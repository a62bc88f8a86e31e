#!/usr/bin/env bash
# gpu_check.sh [STAGE...] — every GPU check and benchmark of the CUDA backend in one run, for a GPU
# machine (see ../shared/tools/README.md): build here, pack with
#   ../shared/tools/devbundle .devbundle build/bin/sparseserve build/bin/cuda_backend_test \
#       build/kernels/libsparseserve_cuda_ops.so
# and run `bash scripts/gpu_check.sh` there with .devbundle and models/ beside the tree.
# Stages (default: all): tests sanitizer golden services kernels attention peer bench graphs (the
# decode cases with CUDA graphs off, for the A/B) profile cublas (decode GEMMs through cuBLASLt
# instead of the skinny kernel) ncu (per-kernel device times of one decode step, from Nsight
# Compute).
# Logs go to /tmp/gpu_check and, packed as gpu_check.tgz, to $OUT when it is set (the device
# tool returns at most 8 files); a short table is printed last.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=/tmp/gpu_check
rm -rf "$out" && mkdir -p "$out"
# shellcheck disable=SC1091
source .devbundle/env.sh
export SPARSESERVE_TEST_DATA_DIR=$root/tests/data SPARSESERVE_MODEL_MIRROR=$root/models
export PYTHONUNBUFFERED=1
stages=${*:-tests sanitizer golden services kernels attention peer bench graphs profile cublas ncu}
summary=()
run() {  # run NAME CMD... — logs to $out/NAME.log, records ok/FAIL
  local name=$1; shift
  echo "=== $name: $*" >&2
  local t0=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then
    summary+=("ok   $name ($((SECONDS - t0)) s)")
  else
    summary+=("FAIL $name ($((SECONDS - t0)) s) — see $name.log")
    tail -n 40 "$out/$name.log" >&2
  fi
}
has() { [[ " $stages " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/gpu.txt" 2>&1
has tests && run tests cuda_backend_test
has sanitizer && run sanitizer compute-sanitizer --tool memcheck --error-exitcode 1 \
  cuda_backend_test --gtest_filter='*RmsNorm*:*Linear*:*Rope*:*SiluMul*:*FillUniform*:*Stories*:*StepGraph*:*SampleMatches*:*SampleRejects*'
if has golden; then
  run golden bash -c "sparseserve generate --device cuda --model models/stories260K/stories260K.gguf \
    --prompt 'Once upon a time' --max-tokens 60 --temperature 0 >$out/golden.txt &&
    cmp $out/golden.txt tests/data/golden_once_upon_a_time.txt"
fi
has services && run services bash scripts/gpu_services_check.sh
lib=.devbundle/lib/libsparseserve_cuda_ops.so
has kernels && [ -f bench/cuda/kernel_check.py ] &&
  run kernels python3 bench/cuda/kernel_check.py --lib "$lib" --out "$out/kernel_check.json"
has attention && [ -f bench/cuda/attention_bench.py ] &&
  run attention python3 bench/cuda/attention_bench.py --lib "$lib" --out "$out/attention.json"
has peer && [ -f bench/cuda/transformers_peer.py ] &&
  run peer python3 bench/cuda/transformers_peer.py --out "$out/transformers.json"
has bench && run bench sparseserve bench model --synthetic llama3-8b --device cuda
has graphs && run graphs sparseserve bench model --synthetic llama3-8b --device cuda \
  --prefill-lengths '' --cuda-graph-batch 0
has profile && run profile sparseserve bench model --synthetic llama3-8b --device cuda \
  --prefill-lengths 8192 --decode-batches 1,8 --decode-contexts 1024,32768 --iters 3 --op-profile
has cublas && run cublas env SPARSESERVE_CUDA_SKINNY_GEMM=0 sparseserve bench model \
  --synthetic llama3-8b --device cuda --prefill-lengths '' --decode-batches 1,8 \
  --decode-contexts 1024
# One decode step (B=1, C=1024) kernel by kernel: device time without launch gaps.
has ncu && run ncu ncu --kernel-name regex:'Skinny|Attention|Merge|RmsNorm|Rope|WriteKv|SiluMul|Gather|gemm|Gemm' \
  --launch-skip 40 --launch-count 460 --section SpeedOfLight --csv --metrics gpu__time_duration.sum \
  sparseserve bench model --synthetic llama3-8b --device cuda --prefill-lengths '' \
  --decode-batches 1 --decode-contexts 1024 --warmup 1 --iters 1 --cuda-graph-batch 0

echo "--- $(cat "$out/gpu.txt")"
for f in services attention peer bench graphs profile cublas; do [ -f "$out/$f.log" ] && { echo "--- $f"; tail -n 25 "$out/$f.log"; }; done
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
[ -n "${OUT:-}" ] && tar -C "$out" -czf "$OUT/gpu_check.tgz" .
