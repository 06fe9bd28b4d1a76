#!/usr/bin/env bash
# LeakSanitizer over the examples (ASan build), 2 ranks each. Open MPI's plugins are unloaded at
# MPI_Finalize, so their leaks cannot be named by a suppression; instead every leak report is
# read, and the test fails only on one whose allocation stack passes through prioccl's code.
# Usage: lsan_examples.sh MPIRUN EXAMPLE...
set -uo pipefail
mpirun=$1
shift
# One report file per process: the ranks' reports on one stream would interleave line by line.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
export ASAN_OPTIONS="detect_leaks=1:log_path=$logs/lsan"
export LSAN_OPTIONS="exitcode=0:fast_unwind_on_malloc=0:suppressions=$(dirname "$0")/lsan.supp:print_suppressions=0"
ours=0 theirs=0 status=0
for example in "$@"; do
  rm -f "$logs"/lsan.*
  run=$("$mpirun" -np 2 "$example" 2>&1) || { echo "$example failed:"; echo "$run"; status=1; }
  out=$(cat "$logs"/lsan.* 2>/dev/null)
  # One report per "Direct/Indirect leak" paragraph; ours if a frame names prioccl.
  read -r o t < <(awk '/^(Direct|Indirect) leak/ { if (n) { if (p) o++; else t++ } n = 1; p = 0; next }
                       n && /prioccl/ { p = 1 }
                       END { if (n) { if (p) o++; else t++ } print o + 0, t + 0 }' <<<"$out")
  if ((o > 0)); then
    echo "$out" | awk '/^(Direct|Indirect) leak/,/^$/' | grep -B2 -A20 prioccl | head -60
  fi
  ours=$((ours + o)) theirs=$((theirs + t))
done
echo "LSAN examples=$# prioccl_leaks=$ours other_library_leaks=$theirs"
((status == 0 && ours == 0))
