#!/usr/bin/env bash
# Runs one libFuzzer target for a fixed number of executions (-runs) and checks that it got through
# them without a finding. CEILING_SECONDS only bounds a run that is stuck or far slower than usual
# (fewer executions by then fails the test, saying how many); it is not what ends a normal run.
# Reproducers land in WORKDIR/artifacts and are printed in hex.
#   run_fuzzer.sh NAME FUZZER WORKDIR RUNS CEILING_SECONDS [libFuzzer flags...]
#   run_fuzzer.sh --skip NAME REASON   (prints REASON, exits 77: CTest's SKIP_RETURN_CODE)
set -uo pipefail
if [[ ${1:-} == --skip ]]; then
  echo "fuzz $2: SKIPPED: $3"
  exit 77
fi
name=$1 fuzzer=$2 work=$3 runs=$4 ceiling=$5
shift 5
mkdir -p "$work/corpus" "$work/seeds" "$work/artifacts"
log=$work/fuzz.log
export UBSAN_OPTIONS=print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}
# libFuzzer only adds to a corpus directory: minimize it once it has grown large, so that loading
# it does not eat into the time of later runs.
if (($(ls "$work/corpus" | wc -l) > 3000)); then
  rm -rf "$work/corpus.min" && mkdir "$work/corpus.min"
  if "$fuzzer" -merge=1 "$@" "$work/corpus.min" "$work/corpus" >"$work/merge.log" 2>&1; then
    rm -rf "$work/corpus" && mv "$work/corpus.min" "$work/corpus"
  fi
fi
# A fixed seed; the fuzzer writes its seed inputs (valid messages in the current wire format)
# into seeds/, read-only to libFuzzer; what it learns accumulates in corpus/ across runs. Past
# findings, kept in the source tree (regressions/NAME/, one input per file), are replayed first
# by every run, read-only too.
regressions=$(cd "$(dirname "$0")" && pwd)/regressions/$name
extra=()
[[ -d $regressions ]] && extra=("$regressions")
PRIOCCL_FUZZ_SEEDS=$work/seeds "$fuzzer" -seed=1 -runs="$runs" -max_total_time="$ceiling" \
  -timeout=10 -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$@" \
  "$work/corpus" "$work/seeds" "${extra[@]}" >"$log" 2>&1
rc=$?
# "Done N runs in S second(s)" ends a run that reached -runs (or the ceiling); the final stats
# come also after a finding.
done=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 \2/p' "$log" | tail -n 1)
read -r n secs <<<"${done:-0 0}"
if [[ -z $done ]]; then
  n=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
  n=${n:-0}
fi
if ((rc != 0)); then
  tail -n 80 "$log"
  grep -o 'Test unit written to .*' "$log" | sed 's/Test unit written to //' | while read -r f; do
    echo "fuzz $name: reproducer $f ($(stat -c %s "$f") bytes), hex:"
    od -An -tx1 -v "$f" | tr -d ' \n' | fold -w 128
    echo
    echo "  rerun: PRIOCCL_FUZZ_TRACE=1 $fuzzer $f"
  done
  echo "fuzz $name: FAILED (exit $rc) after $n executions; full log: $log"
  exit 1
fi
if ((n < runs)); then
  tail -n 20 "$log"
  echo "fuzz $name: only $n of $runs executions before the ${ceiling} s ceiling ($secs s):" \
    "an input that runs for ever, or a machine ten times slower than usual"
  exit 1
fi
replayed=0
[[ -d $regressions ]] && replayed=$(ls "$regressions" | wc -l)
echo "fuzz $name: $n executions, 0 crashes ($secs s, $(ls "$work/corpus" | wc -l) corpus inputs," \
  "$replayed regression input(s) replayed)"
