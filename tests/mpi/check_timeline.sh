#!/usr/bin/env bash
# PRIOCCL_TIMELINE: each rank writes valid Chrome-trace JSON with QUEUE/SEND/RECV/REDUCE spans,
# one track per op, priority in args; and a rank killed mid-run still leaves valid JSON.
# Usage: check_timeline.sh MPIRUN TIMELINE_LOOP_BINARY
set -euo pipefail
mpirun=$1 prog=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

PRIOCCL_TIMELINE="$work/trace.json" "$mpirun" -np 2 -x PRIOCCL_TIMELINE "$prog" 100
python3 - "$work/trace.json" "$work/trace.rank1.json" <<'PY'
import json, sys
for path in sys.argv[1:]:
    events = json.load(open(path))
    phases = {e["name"] for e in events}
    missing = {"QUEUE", "SEND", "RECV", "REDUCE"} - phases
    assert not missing, f"{path}: no {missing} events"
    spans = [e for e in events if e.get("ph") == "X"]
    assert all("priority" in e["args"] for e in spans), f"{path}: a span lacks its priority"
    assert all(e["dur"] >= 0 for e in spans), f"{path}: negative duration"
    tracks = {e["tid"] for e in spans}
    assert len(tracks) > 2, f"{path}: expected one track per op, got {tracks}"
    print(f"{path}: {len(spans)} spans on {len(tracks)} op tracks, valid JSON")
PY

# One rank, killed with SIGKILL while it writes: the file must still parse. It runs under mpirun
# (a singleton would leave Open MPI's helper daemon holding our output open), and only the rank
# process is killed.
PRIOCCL_TIMELINE="$work/killed.json" "$mpirun" -np 1 -x PRIOCCL_TIMELINE "$prog" 1000000 \
  </dev/null >/dev/null 2>&1 &
launcher=$!
sleep 3
rank=$(pgrep -P "$launcher" -f timeline_loop || true)
[[ -n $rank ]] || { echo "rank process not found"; kill "$launcher"; exit 1; }
kill -9 "$rank"
wait "$launcher" 2>/dev/null || true
python3 -c 'import json,sys; e=json.load(open(sys.argv[1])); print(f"killed run: {len(e)} events, valid JSON"); assert len(e) > 10' "$work/killed.json"
