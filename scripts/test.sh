#!/usr/bin/env bash
# Installs dependencies, configures, builds and runs the tests (docs/testing.md, "Tiers").
#   scripts/test.sh            the fast tier (build/): the tests labelled "fast" (ctest -L fast)
#   scripts/test.sh --full     every test (build/), the fast tier's short stand-ins excepted
#   scripts/test.sh --asan     AddressSanitizer + UBSan build (build-asan/), every test
#   scripts/test.sh --tsan     ThreadSanitizer build (build-tsan/), every test
#   scripts/test.sh --ci       --full, then ASan's and TSan's subsets (what CI runs); fails on
#                              any failure, on a sanitizer pattern that selects nothing, and lists
#                              every skipped test with its reason at the end
# Extra arguments go to ctest (e.g. -R mpi.test_allreduce: then without a tier flag the selection
# is the pattern's, of every tier). Every run writes
# <build>/ctest-junit.xml; scripts/skipped_tests.py lists the skips in it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [[ ${1:-} == --ci ]]; then
  shift
  # Sanitized ranks run 5-20x slower on 2 cores, so the sanitizer builds run every test program
  # at 2 ranks (3 where the rank count matters) and over every transport, but not each rank
  # count again; nor the Python tests (an uninstrumented interpreter), the benchmarks and
  # emulator, or the installed-package consumers (paths the other tests cover).
  asan='^(unit\.|leaks\.|stress\.|fault\.mpi|timeline\.|launch\.|mpi\.thread_level|mpi\.test_allreduce\.np3'
  asan+='|mpi\.test_modes\.np3|mpi\.(ucx_(tcp|sm)\.|coll\.|tcp\.)?test_[a-z_]+\.np2)'
  # TSan is the slowest (test_allreduce took 4-10 min at 2 ranks before its data shrank under
  # sanitizers): the all-reduce matrix once, over MPI; of the unit tests only those with threads
  # (test_algos alone ran past its 5 min timeout, single-threaded); of the other MPI programs
  # bad input, its catalogue, faults, point-to-point and device staging at 2 ranks over MPI and
  # UCX. test_collectives, test_comm_split, test_horovod_features and the mpi-coll transport run
  # under ASan only: CI's time. The stress, fault and timeline tests as under ASan.
  tsan='^(unit\.test_(scheduler|train_emu|engine_stuck|bootstrap|tcp_bootstrap)$|stress\.mpi|fault\.mpi|timeline\.|mpi\.thread_level|mpi\.test_modes\.np3'
  tsan+='|mpi\.test_allreduce\.np2|mpi\.(ucx_(tcp|sm)\.)?test_(bad_input|bad_input_catalogue|faults'
  tsan+='|point_to_point|device_buffers)\.np2)'
  status=0
  junits=()
  for mode in --full --asan --tsan; do
    echo "=== scripts/test.sh $mode $(date +%T)"
    extra=()
    # The fast tier's short stand-ins (label fast_only) stay out of the sanitizer runs too.
    [[ $mode == --asan ]] && extra=(-R "$asan" -LE fast_only)
    [[ $mode == --tsan ]] && extra=(-R "$tsan" -LE fast_only)
    bash "$root/scripts/test.sh" $mode "${extra[@]}" "$@" || status=1
    case $mode in
      --full) junits+=("$root/build/ctest-junit.xml") ;;
      --asan) junits+=("$root/build-asan/ctest-junit.xml") ;;
      --tsan) junits+=("$root/build-tsan/ctest-junit.xml") ;;
    esac
  done
  python3 "$root/scripts/skipped_tests.py" "${junits[@]}" || status=1
  echo "=== done $(date +%T), status $status"
  exit $status
fi
build=$root/build sanitize="" tier=(-L fast)
case "${1:-}" in
  --full) tier=(-LE fast_only); shift ;;
  --asan) build=$root/build-asan sanitize=address tier=(); shift ;;
  --tsan) build=$root/build-tsan sanitize=thread tier=(); shift ;;
  *) (($#)) && tier=() ;;  # a selection of the caller's own
esac
"$root/scripts/setup.sh" --test
if [[ -n $sanitize && $# -gt 0 ]]; then
  # A sanitizer run of a selection builds only the programs its tests run (scripts/
  # tested_outputs.py): the rest of the tree, compiled with the sanitizer, would be CI's time.
  PRIOCCL_CONFIGURE_ONLY=1 "$root/scripts/build.sh" "$build" -DPRIOCCL_SANITIZE="$sanitize"
  mapfile -t outputs < <(python3 "$root/scripts/tested_outputs.py" "$build" "${tier[@]}" "$@")
  ((${#outputs[@]})) || { echo "test.sh: the selection runs nothing this build makes" >&2; exit 1; }
  echo "test.sh: building ${#outputs[@]} programs for the selected tests"
  cmake --build "$build" -j "$(nproc)" -- "${outputs[@]}"
else
  "$root/scripts/build.sh" "$build" -DPRIOCCL_SANITIZE="$sanitize"
fi
if [[ $sanitize == thread ]]; then
  # Open MPI's own internals are not TSan-clean; report only races involving prioccl.
  # ignore_noninstrumented_modules: calls from uninstrumented libraries (Open MPI's memcpy into a
  # receive buffer, made by whichever thread is inside MPI and synchronised where TSan cannot
  # see) are not recorded. Recorded, every later read of those bytes was a race, suppressed but
  # checked against every earlier report each time: the bad-input catalogue took 170 s instead
  # of 10, the TSan run 415 s instead of 216 (2026-11-28). prioccl's own code stays instrumented
  # (a race planted between the progress thread and the API is still reported).
  export TSAN_OPTIONS="suppressions=$root/tests/tsan.supp halt_on_error=1 ignore_noninstrumented_modules=1 ${TSAN_OPTIONS:-}"
  # UCX's memory hooks (libucm patches malloc/mmap at load) crash under TSan's interceptors.
  # Without them UCX only loses its registration cache, which TCP and shared memory never need.
  export UCX_MEM_EVENTS=no
fi
if [[ $sanitize == address ]]; then
  # Open MPI keeps its allocations until exit; leaks inside MPI are not ours (the examples' own
  # leak check, leaks.examples.lsan, turns detection back on with suppressions for them).
  export ASAN_OPTIONS="detect_leaks=0 ${ASAN_OPTIONS:-}"
fi
cd "$build"
if [[ -n $sanitize ]]; then  # what the pattern selected, for the log
  ctest -N "${tier[@]}" "$@" | grep -E '^ *Test +#|Total Tests'
fi
# A selection of no tests is an error: a pattern that matches nothing must not pass as a run.
# Lanes (tests/CMakeLists.txt, prioccl_test_lanes): one multi-rank test, or two single-threaded
# ones, on the cores, and one fault run (mostly waiting for timeouts) beside them; -j only has to
# admit them at their ranks.
status=0
ctest --output-on-failure --no-tests=error --output-junit "$build/ctest-junit.xml" \
  --resource-spec-file "$root/tests/ctest_lanes.json" -j 16 "${tier[@]}" "$@" || status=$?
python3 "$root/scripts/skipped_tests.py" "$build/ctest-junit.xml" || true
exit $status
