#!/usr/bin/env bash
# build_nccl_tests.sh SRC — builds NVIDIA's nccl-tests all_reduce_perf (the peer of the tensor
# parallel all-reduce figures, issue 19) from a checkout at SRC (fetched, never committed) into
# .nccl-tests/ (git-ignored), against the CUDA toolkit's NCCL, for Hopper. gpu_pack.sh packs it
# when it is there.
set -euo pipefail
src=${1:?usage: build_nccl_tests.sh PATH_TO_NCCL_TESTS_CHECKOUT}
root=$(cd "$(dirname "$0")/.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
make -s -j"${SPARSESERVE_JOBS:-2}" -C "$src/src" CUDA_HOME="$cuda" NCCL_HOME="$cuda" \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$root/.nccl-tests" \
  "$root/.nccl-tests/all_reduce_perf"
echo "built $root/.nccl-tests/all_reduce_perf"
