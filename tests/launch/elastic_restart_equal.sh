#!/bin/bash
# Elastic training through `python3 -m prioccl.run --min-np 3` (issue 46): 4 workers train
# (python/tests/elastic_worker.py), rank 1 kills itself at step 23, the other three shrink and
# train on; the new rank 0 saves the state they went on from. Then a fresh job of 3 workers
# starts from that state. Passes when the launcher let the three finish (exit 0), every worker of
# both jobs ends with the same weights, and the two jobs' weights are equal bit for bit.
#   elastic_restart_equal.sh PYTHON
set -u
python=$1
worker=$(dirname "$0")/../../python/tests/elastic_worker.py
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "SKIPPED: no torch"
  exit 0
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ELASTIC_KILL=1:23 ELASTIC_STEPS=80 ELASTIC_SAVE=$dir/commit.pt \
  "$python" -m prioccl.run -np 4 --min-np 3 "$worker" > "$dir/shrunk.log" 2>&1
shrunk_rc=$?
sed 's/^/[shrunk] /' "$dir/shrunk.log"
ELASTIC_STEPS=80 ELASTIC_RESUME=$dir/commit.pt \
  "$python" -m prioccl.run -np 3 "$worker" > "$dir/restarted.log" 2>&1
restarted_rc=$?
sed 's/^/[restarted] /' "$dir/restarted.log"
shas() { grep -o 'weights_sha1=[0-9a-f]*' "$1" | sort -u; }
echo "ELASTIC shrunk: exit $shrunk_rc, $(grep -c 'LAUNCH rank=[0-9] ok' "$dir/shrunk.log") ok," \
  "weights $(shas "$dir/shrunk.log" | tr '\n' ' ')"
echo "ELASTIC restarted: exit $restarted_rc, $(grep -c 'LAUNCH rank=[0-9] ok' "$dir/restarted.log")" \
  "ok, weights $(shas "$dir/restarted.log" | tr '\n' ' ')"
[ $shrunk_rc -eq 0 ] && [ $restarted_rc -eq 0 ] &&
  grep -q 'worker 1 failed' "$dir/shrunk.log" &&
  [ "$(grep -c 'LAUNCH rank=[0-9] ok' "$dir/shrunk.log")" -eq 3 ] &&
  [ "$(grep -c 'LAUNCH rank=[0-9] ok' "$dir/restarted.log")" -eq 3 ] &&
  [ "$(shas "$dir/shrunk.log" | wc -l)" -eq 1 ] &&
  [ "$(shas "$dir/shrunk.log")" = "$(shas "$dir/restarted.log")" ] && echo "ELASTIC_RESULT equal" ||
  { echo "ELASTIC_RESULT different or failed"; exit 1; }
