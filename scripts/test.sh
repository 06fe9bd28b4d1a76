#!/usr/bin/env bash
# Installs dependencies, configures, builds and runs the whole test suite.
#   scripts/test.sh                 normal build (build/)
#   scripts/test.sh --asan          AddressSanitizer + UBSan build (build-asan/)
#   scripts/test.sh --tsan          ThreadSanitizer build (build-tsan/)
# Extra arguments go to ctest (e.g. -R mpi.test_allreduce).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build sanitize=""
case "${1:-}" in
  --asan) build=$root/build-asan sanitize=address; shift ;;
  --tsan) build=$root/build-tsan sanitize=thread; shift ;;
esac
"$root/scripts/build.sh" "$build" -DPRIOCCL_SANITIZE="$sanitize"
if [[ $sanitize == thread ]]; then
  # Open MPI's own internals are not TSan-clean; report only races involving prioccl.
  export TSAN_OPTIONS="suppressions=$root/tests/tsan.supp halt_on_error=1 ${TSAN_OPTIONS:-}"
  # UCX's memory hooks (libucm patches malloc/mmap at load) crash under TSan's interceptors.
  # Without them UCX only loses its registration cache, which TCP and shared memory never need.
  export UCX_MEM_EVENTS=no
fi
if [[ $sanitize == address ]]; then
  # Open MPI keeps its allocations until exit; leaks inside MPI are not ours.
  export ASAN_OPTIONS="detect_leaks=0 ${ASAN_OPTIONS:-}"
fi
cd "$build"
ctest --output-on-failure "$@"
