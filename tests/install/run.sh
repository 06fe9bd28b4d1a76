#!/usr/bin/env bash
# Installs the built tree into a scratch prefix, then builds consumers only from what was
# installed: the examples through find_package(prioccl CONFIG), and an independent C program
# through `mpicc $(pkg-config --cflags --libs prioccl)`; then a project that pulls the source tree
# in with add_subdirectory(), built with CMake's default generator. Each runs on 4 ranks.
# Usage: run.sh BUILD_DIR SOURCE_DIR   (MPIRUN may name the mpirun wrapper)
set -euo pipefail
build=$1 src=$2
mpirun=(${MPIRUN:-$src/scripts/mpirun-local})
# Sanitizer builds: the consumers are not instrumented, so each rank preloads the runtime.
[[ -n ${PRIOCCL_RANK_PRELOAD:-} ]] && mpirun+=(-x "LD_PRELOAD=$PRIOCCL_RANK_PRELOAD")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
lib=$(find "$work/prefix" -name 'libprioccl.so.*.*' | head -1)
echo "installed: $(cd "$work/prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"
# Read the whole header first: `objdump | grep -q` under pipefail fails when grep exits early
# and objdump dies of SIGPIPE (seen once in a full ctest run).
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
[[ $soname == libprioccl.so.1 ]] || { echo "bad SONAME '$soname' in $lib"; exit 1; }

cmake -S "$src/examples" -B "$work/ex" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/ex" >/dev/null
"${mpirun[@]}" -np 4 "$work/ex/allreduce_example"
"${mpirun[@]}" -np 4 "$work/ex/async_priorities"

export PKG_CONFIG_PATH=$(dirname "$(find "$work/prefix" -name prioccl.pc)")
# The .pc carries no rpath (a packager's choice, not ours); this consumer chooses one itself.
libs=$(pkg-config --libs prioccl)
[[ $libs != *rpath* ]] || { echo "prioccl.pc puts an rpath in Libs: $libs"; exit 1; }
mpicc -std=c11 -Wall -Wextra -Werror -O2 "$src/tests/install/stress_consumer.c" \
  $(pkg-config --cflags prioccl) $libs -Wl,-rpath,"$(pkg-config --variable=libdir prioccl)" -lm \
  -o "$work/stress_consumer"
# Open MPI 4.1's AVX reduction component saturates 8-bit integer sums instead of wrapping
# (open-mpi/ompi#8045, closed as wontfix); prioccl wraps like C and NCCL, so the MPI reference
# runs with that component off.
OMPI_MCA_op=^avx "${mpirun[@]}" -np 4 "$work/stress_consumer" "${STRESS_OPS:-2000}"

# add_subdirectory() with the default generator (Unix Makefiles): no generator is named here.
unset CMAKE_GENERATOR
cmake -S "$src/tests/install/subdir_consumer" -B "$work/sub" -DPRIOCCL_SOURCE_DIR="$src" >/dev/null
grep -q '^CMAKE_GENERATOR:INTERNAL=Unix Makefiles$' "$work/sub/CMakeCache.txt" ||
  { echo "expected the default generator, got: $(grep '^CMAKE_GENERATOR:' "$work/sub/CMakeCache.txt")"; exit 1; }
cmake --build "$work/sub" -j "$(nproc)" >/dev/null
"${mpirun[@]}" -np 4 "$work/sub/allreduce_example"
echo "install.consumers: find_package, pkg-config and add_subdirectory (Unix Makefiles) consumers OK"
