#!/usr/bin/env bash
# fetch_model.sh [DEST_DIR] — puts the default model, stories260K (GGUF, plus the llama2.c
# checkpoint and tokenizer the tests compare against), into DEST_DIR
# (default: models/ in the repository, which git ignores). Takes it from the local mirror
# $SPARSESERVE_MODEL_MIRROR (default ../shared/models beside the repository) when present,
# otherwise downloads it from its public origin; the sha256 is checked either way.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/models}
mirror=${SPARSESERVE_MODEL_MIRROR:-$root/../shared/models}
# file  sha256  origin (karpathy/tinyllamas for the llama2.c files, ggml-org for the GGUF copy)
files=(
  "stories260K.gguf 270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf"
  "stories260K.bin b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696 https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/stories260K.bin"
  "tok512.bin 037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312 https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/tok512.bin"
)
mkdir -p "$dest/stories260K"
for entry in "${files[@]}"; do
  read -r name sha url <<<"$entry"
  out=$dest/stories260K/$name
  check() { echo "$sha  $1" | sha256sum --check --status; }
  if [ -f "$out" ] && check "$out"; then
    echo "model: $out (sha256 ok)"
    continue
  fi
  if [ -f "$mirror/stories260K/$name" ]; then
    cp "$mirror/stories260K/$name" "$out.tmp"
    src="mirror $mirror"
  else
    echo "model: no mirror at $mirror; downloading $url"
    curl -fL --retry 3 -o "$out.tmp" "$url"
    src="$url"
  fi
  if ! check "$out.tmp"; then
    rm -f "$out.tmp"
    echo "model: sha256 mismatch for $name from $src (expected $sha)" >&2
    exit 1
  fi
  mv "$out.tmp" "$out"
  echo "model: $out from $src (sha256 ok)"
done
