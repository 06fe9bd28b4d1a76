#!/bin/bash
# A rank that is only slow is not a lost rank (issue 46): 4 workers train in @hvd.elastic.run
# (python/tests/elastic_worker.py) under `prioccl.run` without --min-np, and rank 2's whole
# process stops (SIGSTOP) for ELASTIC_STALL_S seconds (default 3) at step 10, under
# PRIOCCL_TIMEOUT_S (default here 8). Passes when it stalled, nobody reported a lost rank, and
# all four finished on 4 ranks with the same weights.
#   elastic_slow_rank.sh PYTHON
set -u
python=$1
worker=$(dirname "$0")/../../python/tests/elastic_worker.py
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "SKIPPED: no torch"
  exit 0
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export PRIOCCL_TIMEOUT_S=${PRIOCCL_TIMEOUT_S:-8}
start=$(date +%s%N)
ELASTIC_STALL=2:10:${ELASTIC_STALL_S:-3} ELASTIC_LOST=0 ELASTIC_STEPS=30 \
  "$python" -m prioccl.run -np 4 "$worker" > "$log" 2>&1
rc=$?
cat "$log"
oks=$(grep -o 'LAUNCH rank=[0-9]* ok' "$log" | sort -u | wc -l)
echo "ELASTIC slow rank: exit $rc, $oks of 4 ok, stalled: $(grep -c 'stalls' "$log")," \
  "lost reported: $(grep -c 'lost:' "$log"), $(( ($(date +%s%N) - start) / 1000000 )) ms" \
  "(PRIOCCL_TIMEOUT_S=$PRIOCCL_TIMEOUT_S)"
[ $rc -eq 0 ] && [ "$oks" -eq 4 ] && grep -q 'stalls' "$log" && ! grep -q 'lost:' "$log" &&
  echo "ELASTIC_RESULT kept" || { echo "ELASTIC_RESULT lost or failed"; exit 1; }
