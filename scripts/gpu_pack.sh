#!/usr/bin/env bash
# gpu_pack.sh — packs what scripts/gpu_check.sh needs on a GPU machine into .devpack/ (git-ignored):
# the programs and their shared libraries (../shared/tools/devbundle), stripped and xz-compressed
# to fit the device tool's 64 MiB transfer limit, and the stories260K model.
# On the GPU machine: tar -xJf .devpack/bundle.tar.xz && cp -r .devpack/models . && bash scripts/gpu_check.sh
# With SPARSESERVE_BASELINE_BIN=path/to/an/older/sparseserve it also packs that binary for the
# old-vs-new stage.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${1:-build}
rm -rf .devbundle .devpack
mkdir -p .devpack
# .nccl-tests/all_reduce_perf (scripts/build_nccl_tests.sh), when built: the peer of the tensor
# parallel all-reduce figures.
# kv_transfer_bench and the ucx_perftest of the UCX it links (PyPI's libucx-cu13, whose CUDA
# module can run perftest on GPU memory): the GPU-direct KV transfer figures (issue 20).
ucx_root=$(python3 -c 'import libucx, os; print(os.path.dirname(libucx.__file__))' 2>/dev/null || true)
perftest=$( [ -x "$ucx_root/bin/ucx_perftest" ] && echo "$ucx_root/bin/ucx_perftest")
../shared/tools/devbundle .devbundle "$build/bin/sparseserve" "$build/bin/cuda_backend_test" \
  "$build/kernels/libsparseserve_cuda_ops.so" "$build/bin/kv_transfer_bench" $perftest \
  $( [ -x .nccl-tests/all_reduce_perf ] && echo .nccl-tests/all_reduce_perf) >/dev/null
# UCX loads its transports (tcp, shared memory, cuda_copy, ...) with dlopen from ucx/ next to
# libucs; devbundle follows only linked libraries, so the module folder is copied by hand.
ucs=$(ldd "$build/bin/sparseserve" | awk '$1 == "libucs.so.0" {print $3}')
if [ -n "$ucs" ] && [ -d "$(dirname "$ucs")/ucx" ]; then
  rm -rf .devbundle/lib/ucx  # devbundle's guess is the system UCX's modules: a different version
  mkdir -p .devbundle/lib/ucx
  cp -L "$(dirname "$ucs")"/ucx/*.so.0 .devbundle/lib/ucx/
  # The wheel's vendored libraries (ucx_perftest's CUDA module needs its own libcudart and
  # libgomp; found there through .devbundle/env.sh's LD_LIBRARY_PATH).
  libs=$(dirname "$ucs")/../../libucx_cu13.libs
  [ -d "$libs" ] && cp -L "$libs"/*.so* .devbundle/lib/
fi
strip --strip-debug .devbundle/bin/* .devbundle/lib/libsparseserve_cuda_ops.so
bundles=.devbundle
# $SPARSESERVE_BASELINE_BIN: an older `sparseserve` for A/B benchmarks (gpu_check.sh's `baseline`
# stage), bundled with its own libraries and, when its build has it, its C API library.
if [ -n "${SPARSESERVE_BASELINE_BIN:-}" ]; then
  rm -rf .devbundle-baseline
  baseline_ops=$(dirname "$SPARSESERVE_BASELINE_BIN")/../kernels/libsparseserve_cuda_ops.so
  ../shared/tools/devbundle .devbundle-baseline "$SPARSESERVE_BASELINE_BIN" \
    $( [ -f "$baseline_ops" ] && echo "$baseline_ops") >/dev/null
  strip --strip-debug .devbundle-baseline/bin/*
  bundles="$bundles .devbundle-baseline"
fi
tar -cJf .devpack/bundle.tar.xz $bundles
cp -r models .devpack/models
du -sh .devpack
