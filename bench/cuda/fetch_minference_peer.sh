#!/usr/bin/env bash
# fetch_minference_peer.sh [MIRROR] — copies the files of MInference's own kernels that
# bench/cuda/sparse_prefill_bench.py --minference-repo runs (the Triton vertical-slash kernel and
# the CUDA index converter, built on the GPU machine with torch's cpp_extension) from a checkout
# of github.com/microsoft/MInference into .peer/minference (git-ignored; carry it to the GPU
# machine, never commit it). MIRROR: a git directory of the repository (default: the session
# tool's mirror, /work/.mirror/microsoft+MInference/repo).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mirror=${1:-/work/.mirror/microsoft+MInference/repo}
dest=$root/.peer/minference
rm -rf "$dest"
for f in minference/ops/pit_sparse_flash_attention_v2.py csrc/kernels.cpp \
         csrc/vertical_slash_index.cu; do
  mkdir -p "$dest/$(dirname "$f")"
  git --git-dir="$mirror" show "HEAD:$f" >"$dest/$f"
done
echo "MInference $(git --git-dir="$mirror" rev-parse --short HEAD) -> $dest"
