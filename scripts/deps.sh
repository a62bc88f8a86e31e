#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages sparseserve builds with (Debian 12 / Ubuntu 24.04).
# Python packages are only for test tooling and are installed by scripts/test.sh when needed.
set -euo pipefail
PKGS=(build-essential cmake ninja-build ccache pkg-config git curl ca-certificates python3
      libabsl-dev libspdlog-dev nlohmann-json3-dev libpcre2-dev libopenblas-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
      libucx-dev ucx-utils prometheus-cpp-dev libcpp-httplib-dev
      clang libclang-rt-dev clang-format clang-tidy)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
