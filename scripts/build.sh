#!/usr/bin/env bash
# build.sh [BUILD_DIR] [extra cmake args...] — configure (once) and build everything with Ninja
# (or only the targets in $SPARSESERVE_BUILD_TARGETS).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build}
shift || true
jobs=${SPARSESERVE_JOBS:-$(nproc)}
# ccache keys on paths below here relative to the build: a fresh clone elsewhere (CI) reuses what
# an earlier checkout compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S "$root" -B "$dir" -G Ninja "$@"
fi
# shellcheck disable=SC2086
cmake --build "$dir" -j "$jobs" ${SPARSESERVE_BUILD_TARGETS:+--target $SPARSESERVE_BUILD_TARGETS}
