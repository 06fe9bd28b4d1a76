#!/usr/bin/env bash
# Installs prioccl's dependencies from Debian's archive. Idempotent and quiet when everything is
# already present. CUDA/NCCL are optional and never installed here.
#   scripts/setup.sh          what building the library, examples and perf tools needs
#   scripts/setup.sh --test   that plus the test suite's and demo's extras (GoogleTest, clang for
#                             the fuzzers, valgrind, Python with NumPy/PyTorch, venv/setuptools/
#                             wheel for the pip install test, iproute2; OpenBLAS, single-threaded
#                             like the benchmarks' ranks, under Debian's torch, whose matrix
#                             products otherwise run on the reference BLAS, 4-5x slower)
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config
          libopenmpi-dev openmpi-bin libucx-dev libibverbs-dev librdmacm-dev libhwloc-dev
          libcli11-dev nlohmann-json3-dev)
case "${1:-}" in
  "") ;;
  --test)
    packages+=(googletest libgtest-dev binutils python3 python3-numpy python3-matplotlib
               python3-torch python3-sklearn iproute2 clang libclang-rt-14-dev valgrind
               python3-venv python3-setuptools python3-wheel python3-wheel-whl python3-torchvision
               libopenblas0-serial)
    ;;
  *) echo "usage: setup.sh [--test]" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0
sudo=""
if [[ $(id -u) != 0 ]]; then
  command -v sudo >/dev/null || { echo "setup.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
