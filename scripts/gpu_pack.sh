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
# UCX loads its transports (tcp, shared memory, cuda_copy, ...) with dlopen from ucx/ next to
# libucs; devbundle follows only linked libraries, so the module folder is copied by hand.
ucs=$(ldd "$build/bin/sparseserve" | awk '$1 == "libucs.so.0" {print $3}')
if [ -n "$ucs" ] && [ -d "$(dirname "$ucs")/ucx" ]; then
  mkdir -p .devbundle/lib/ucx
  cp -L "$(dirname "$ucs")"/ucx/*.so.0 .devbundle/lib/ucx/
fi
strip --strip-debug .devbundle/bin/* .devbundle/lib/libsparseserve_cuda_ops.so
tar -cJf .devpack/bundle.tar.xz .devbundle
cp -r models .devpack/models
du -sh .devpack
