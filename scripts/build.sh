#!/usr/bin/env bash
# Configures and builds prioccl. Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
# Prints CMake's prioccl summary (transports, GPU, tests); the whole configure log on failure.
# PRIOCCL_CONFIGURE_ONLY=1: configures and stops (scripts/test.sh then builds what it runs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
"$root/scripts/setup.sh"
mkdir -p "$build"
if ! cmake -S "$root" -B "$build" -G Ninja "$@" >"$build/configure.log" 2>&1; then
  cat "$build/configure.log" >&2
  exit 1
fi
grep -E '^-- prioccl' "$build/configure.log" || true
[[ ${PRIOCCL_CONFIGURE_ONLY:-} == 1 ]] || cmake --build "$build" -j "$(nproc)"
