#!/usr/bin/env bash
# PRIOCCL_DEBUG_FILE: each rank's log lines land in the file named by the pattern with %h (host),
# %p (pid) and %r (rank) substituted, not on stderr; a file that cannot be opened is reported
# once on stderr, naming the variable and the path, and the lines go to stderr instead.
# Usage: check_debug_file.sh MPIRUN PROGRAM (a prioccl program taking a round count, e.g.
# timeline_loop)
set -euo pipefail
mpirun=$1 prog=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
host=$(hostname)

PRIOCCL_DEBUG=TRACE PRIOCCL_DEBUG_FILE="$work/log.%h.%p.%r" \
  "$mpirun" -np 2 -x PRIOCCL_DEBUG -x PRIOCCL_DEBUG_FILE "$prog" 2 2>"$work/stderr"
for r in 0 1; do
  files=("$work"/log."${host:0:63}".*."$r")
  [[ ${#files[@]} == 1 && -s ${files[0]} ]] || { echo "rank $r: no log.$host.<pid>.$r"; ls "$work"; exit 1; }
  grep -q "PRIOCCL TRACE rank $r:" "${files[0]}" || { echo "rank $r's lines not in ${files[0]}"; exit 1; }
  if grep -q "PRIOCCL TRACE rank $((1 - r)):" "${files[0]}"; then
    echo "rank $((1 - r))'s lines in rank $r's file"; exit 1
  fi
  echo "rank $r: $(wc -l <"${files[0]}") lines in $(basename "${files[0]}")"
done
grep -q "nranks=2" "$work"/log.*.0 || { echo "rank 0's configuration line missing"; exit 1; }
# Where the creation's time went: every stage named, with its milliseconds, adding up to no more
# than the total.
timings=$(grep -o "init timings (ms): .*" "$work"/log.*.0) || { echo "rank 0's init timings line missing"; exit 1; }
awk '{ total = $5; sum = 0; n = 0
       for (i = 6; i <= NF; i += 2) { gsub(/[(),]/, "", $(i + 1)); sum += $(i + 1); n++ }
       exit !(n == 6 && total > 0 && sum <= total + 0.05) }' <<<"$timings" ||
  { echo "init timings line malformed: $timings"; exit 1; }
echo "$timings"
if grep -q "PRIOCCL" "$work/stderr"; then
  echo "log lines on stderr although PRIOCCL_DEBUG_FILE is set:"; head "$work/stderr"; exit 1
fi

# Unwritable: one warning per rank (TRACE: every rank logs) on stderr, not one per line; the
# lines go there.
PRIOCCL_DEBUG=TRACE PRIOCCL_DEBUG_FILE="$work/no/such/dir/log.%r" \
  "$mpirun" -np 2 -x PRIOCCL_DEBUG -x PRIOCCL_DEBUG_FILE "$prog" 1 2>"$work/stderr2"
warnings=$(grep -c "cannot open PRIOCCL_DEBUG_FILE=$work/no/such/dir/log.%r" "$work/stderr2" || true)
[[ $warnings == 2 ]] || { echo "expected one warning per rank, got $warnings:"; cat "$work/stderr2"; exit 1; }
grep -q "PRIOCCL INFO prioccl .* nranks=2" "$work/stderr2" || { echo "lines did not fall back to stderr"; cat "$work/stderr2"; exit 1; }
echo "unwritable PRIOCCL_DEBUG_FILE: reported once per rank, lines on stderr"
