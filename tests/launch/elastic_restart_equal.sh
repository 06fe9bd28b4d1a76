#!/bin/bash
# Elastic training through `python3 -m prioccl.run --min-np 3` (issue 46): 4 workers train
# (python/tests/elastic_worker.py), rank ELASTIC_VICTIM (default 1) kills itself at step 23, the
# other three shrink and train on; the new rank 0 saves the state they went on from. Then a fresh
# job of 3 workers starts from that state. Passes when the launcher let the three finish (exit 0),
# every worker of both jobs ends with the same weights, and the two jobs' weights are equal bit
# for bit. ELASTIC_REGROW=1: then also a job of 4 from that state, as torchrun's restart once the
# lost host is back: every worker must resume at the saved step and end with the same weights.
# The worker's other variables pass through (ELASTIC_MODE, ELASTIC_DDP), and so do
# the arguments after PYTHON, to prioccl.run (--store).
#   elastic_restart_equal.sh PYTHON [PRIOCCL.RUN ARGUMENTS...]
set -u
python=$1
shift
victim=${ELASTIC_VICTIM:-1}
worker=$(dirname "$0")/../../python/tests/elastic_worker.py
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "SKIPPED: no torch"
  exit 0
fi
shas() { grep -o 'weights_sha1=[0-9a-f]*' "$1" | sort -u; }
# The ranks that printed "ok", each once: grep -o, since lines of two workers can run together.
oks() { grep -o 'LAUNCH rank=[0-9]* ok' "$1" | sort -u | wc -l; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ELASTIC_KILL=$victim:23 ELASTIC_STEPS=${ELASTIC_STEPS:-80} ELASTIC_SAVE=$dir/commit.pt \
  "$python" -m prioccl.run -np 4 --min-np 3 "$@" "$worker" > "$dir/shrunk.log" 2>&1
shrunk_rc=$?
sed 's/^/[shrunk] /' "$dir/shrunk.log"
ELASTIC_STEPS=${ELASTIC_STEPS:-80} ELASTIC_RESUME=$dir/commit.pt \
  "$python" -m prioccl.run -np 3 "$@" "$worker" > "$dir/restarted.log" 2>&1
restarted_rc=$?
sed 's/^/[restarted] /' "$dir/restarted.log"
regrown_ok=true
if [ "${ELASTIC_REGROW:-0}" = 1 ]; then
  ELASTIC_STEPS=${ELASTIC_STEPS:-80} ELASTIC_RESUME=$dir/commit.pt \
    "$python" -m prioccl.run -np 4 "$@" "$worker" > "$dir/regrown.log" 2>&1
  regrown_rc=$?
  sed 's/^/[regrown] /' "$dir/regrown.log"
  saved=$(grep -o 'saved step [0-9]*' "$dir/shrunk.log" | grep -o '[0-9]*$')
  resumed=$(grep -o "resumes at step ${saved:-none}\b" "$dir/regrown.log" | wc -l)
  echo "ELASTIC regrown: exit $regrown_rc, saved at step ${saved:-none}, $resumed of 4 resumed there," \
    "$(oks "$dir/regrown.log") ok, weights $(shas "$dir/regrown.log" | tr '\n' ' ')"
  [ $regrown_rc -eq 0 ] && [ "$resumed" -eq 4 ] &&
    [ "$(oks "$dir/regrown.log")" -eq 4 ] && [ "$(shas "$dir/regrown.log" | wc -l)" -eq 1 ] ||
    regrown_ok=false
fi
echo "ELASTIC shrunk: exit $shrunk_rc, $(oks "$dir/shrunk.log") ok," \
  "weights $(shas "$dir/shrunk.log" | tr '\n' ' ')"
echo "ELASTIC restarted: exit $restarted_rc, $(oks "$dir/restarted.log")" \
  "ok, weights $(shas "$dir/restarted.log" | tr '\n' ' ')"
[ $shrunk_rc -eq 0 ] && [ $restarted_rc -eq 0 ] &&
  grep -q "worker $victim failed" "$dir/shrunk.log" &&
  [ "$(oks "$dir/shrunk.log")" -eq 3 ] &&
  [ "$(oks "$dir/restarted.log")" -eq 3 ] &&
  [ "$(shas "$dir/shrunk.log" | wc -l)" -eq 1 ] &&
  [ "$(shas "$dir/shrunk.log")" = "$(shas "$dir/restarted.log")" ] && $regrown_ok &&
  echo "ELASTIC_RESULT equal" ||
  { echo "ELASTIC_RESULT different or failed"; exit 1; }
