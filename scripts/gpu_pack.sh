#!/usr/bin/env bash
# gpu_pack.sh — packs what scripts/gpu_check.sh needs on a GPU machine into .devpack/ (git-ignored):
# the programs and their shared libraries (../shared/tools/devbundle), stripped and xz-compressed
# to fit the device tool's 64 MiB transfer limit, and the stories260K model.
# On the GPU machine: tar -xJf .devpack/bundle.tar.xz && cp -r .devpack/models . && bash scripts/gpu_check.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${1:-build}
rm -rf .devbundle .devpack
mkdir -p .devpack
../shared/tools/devbundle .devbundle "$build/bin/sparseserve" "$build/bin/cuda_backend_test" \
  "$build/kernels/libsparseserve_cuda_ops.so" >/dev/null
strip --strip-debug .devbundle/bin/* .devbundle/lib/libsparseserve_cuda_ops.so
tar -cJf .devpack/bundle.tar.xz .devbundle
cp -r models .devpack/models
du -sh .devpack
