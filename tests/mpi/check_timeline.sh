#!/usr/bin/env bash
# PRIOCCL_TIMELINE: each rank writes valid Chrome-trace JSON with QUEUE/SEND/RECV/REDUCE spans,
# one track per op, priority in args; op keys that need escaping (quote, backslash, control
# character, a byte that is not UTF-8) survive a round trip through Python's json module; the
# ranks' files share rank 0's clock, so that after scripts/prioccl-timeline merge one op's chunks
# end at about the same time on every rank, even with each rank's clock skewed on purpose; and a
# rank killed mid-run still leaves valid JSON.
# Usage: check_timeline.sh MPIRUN TIMELINE_LOOP_BINARY
set -euo pipefail
mpirun=$1 prog=$2
here=$(cd "$(dirname "$0")" && pwd)
tool="$here/../../scripts/prioccl-timeline"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Rank r's clock runs r x 37 ms ahead: without the offset measured at creation, the merged
# trace's chunk ends would be tens of ms apart.
skew_us=37000
PRIOCCL_TIMELINE="$work/trace.json" PRIOCCL_TIMELINE_CLOCK_SKEW_US=$skew_us \
  "$mpirun" -np 4 -x PRIOCCL_TIMELINE -x PRIOCCL_TIMELINE_CLOCK_SKEW_US "$prog" 30
files=("$work/trace.json" "$work/trace.rank1.json" "$work/trace.rank2.json" "$work/trace.rank3.json")
python3 - "$skew_us" "${files[@]}" <<'PY'
import json, sys
skew_us = float(sys.argv[1])
keys = {'a"b\\c', "tab\there\x01ctl", "bad\ufffdutf8"}
for rank, path in enumerate(sys.argv[2:]):
    events = json.load(open(path, encoding="utf-8"))
    phases = {e["name"] for e in events}
    missing = {"QUEUE", "SEND", "RECV", "REDUCE"} - phases
    assert not missing, f"{path}: no {missing} events"
    spans = [e for e in events if e.get("ph") == "X"]
    assert all("priority" in e["args"] for e in spans), f"{path}: a span lacks its priority"
    assert all(e["dur"] >= 0 for e in spans), f"{path}: negative duration"
    tracks = {e["tid"] for e in spans}
    assert len(tracks) > 2, f"{path}: expected one track per op, got {tracks}"
    seen = {e["args"]["key"] for e in spans if e["name"] == "QUEUE"}
    assert keys <= seen, f"{path}: op keys {keys - seen!r} did not round-trip; saw {seen!r}"
    clock = [e["args"] for e in events if e.get("name") == "clock_sync"]
    assert len(clock) == 1 and clock[0]["aligned_to_rank0"], f"{path}: no clock_sync record"
    c = clock[0]
    # The measured offset must cancel the injected skew, to within half the round trip (+ 50 us
    # for the clock reads themselves).
    err = abs(c["offset_us"] + rank * skew_us)
    assert err <= c["rtt_us"] / 2 + 50, f"{path}: offset {c['offset_us']} us, skew {rank * skew_us}"
    print(f"{path}: {len(spans)} spans on {len(tracks)} op tracks, keys round-trip, "
          f"offset {c['offset_us']:.1f} us (rtt {c['rtt_us']:.1f} us), valid JSON")
PY

"$tool" merge "$work/merged.json" "${files[@]}"
python3 - "$work/merged.json" "$skew_us" <<'PY'
import json, statistics, sys
trace = json.load(open(sys.argv[1], encoding="utf-8"))
skew_ms = float(sys.argv[2]) / 1000
events = trace["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
assert names == {r: f"rank {r}" for r in range(4)}, f"processes: {names}"
assert set(trace["otherData"]["prioccl_clock"]) == {"0", "1", "2", "3"}
# A chunk of an all-reduce completes on a rank with its last receive, which needs data that
# every rank contributed: the ranks' ends of one chunk are genuinely close in time. Compare
# them across ranks, chunk by chunk, op by op.
ends = {}
for e in events:
    if e.get("ph") == "X" and e["name"] == "RECV":
        key = (e["tid"], e["args"]["chunk"])
        per_rank = ends.setdefault(key, {})
        per_rank[e["pid"]] = max(per_rank.get(e["pid"], 0), e["ts"] + e["dur"])
spreads = sorted((max(v.values()) - min(v.values())) / 1000 for v in ends.values() if len(v) == 4)
assert len(spreads) >= 30, f"only {len(spreads)} chunks seen on all 4 ranks"
median = statistics.median(spreads)
p90 = spreads[int(0.9 * len(spreads))]
print(f"merged: chunk-end spread across 4 ranks over {len(spreads)} chunks: median "
      f"{median:.3f} ms, p90 {p90:.3f} ms, max {spreads[-1]:.3f} ms")
# Unaligned, rank 3's ends would sit 3 x 37 ms after rank 0's (spread >= 111 ms). Aligned, the
# spread is scheduling noise: 0.2-0.4 ms on a quiet machine, but 2-3 ms under ThreadSanitizer and
# 4 ms in a plain build while the machine compiles (a 1 ms bound failed in CI). A quarter of one
# rank's skew separates the two by 10x either way; the exact check is the offset's, above.
bound = skew_ms / 4
assert median < bound, (f"ranks' clocks not aligned: median chunk-end spread {median:.3f} ms "
                        f">= {bound:.2f} ms (a quarter of the {skew_ms:.0f} ms skew per rank)")
PY

# One rank, killed with SIGKILL while it writes: the file must still parse. It runs under mpirun
# (a singleton would leave Open MPI's helper daemon holding our output open), and only the rank
# process is killed.
PRIOCCL_TIMELINE="$work/killed.json" "$mpirun" -np 1 -x PRIOCCL_TIMELINE "$prog" 1000000 \
  </dev/null >/dev/null 2>&1 &
launcher=$!
# Kill it once it has written some events (a fixed sleep was too short under sanitizers).
for _ in $(seq 600); do
  (($(stat -c %s "$work/killed.json" 2>/dev/null || echo 0) > 20000)) && break
  sleep 0.1
done
rank=$(pgrep -P "$launcher" -f timeline_loop || true)
[[ -n $rank ]] || { echo "rank process not found"; kill "$launcher"; exit 1; }
kill -9 "$rank"
wait "$launcher" 2>/dev/null || true
python3 -c 'import json,sys; e=json.load(open(sys.argv[1])); print(f"killed run: {len(e)} events, valid JSON"); assert len(e) > 10' "$work/killed.json"
# merge reads a file cut in the middle of an event (as if written by something less careful) up
# to its last complete event, as Chrome would.
size=$(stat -c %s "$work/killed.json")
head -c $((size / 2)) "$work/killed.json" >"$work/cut.json"
"$tool" merge "$work/cut_merged.json" "$work/cut.json" 2>&1
python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["traceEvents"]; print(f"cut file merged: {len(e)} events"); assert len(e) > 5' "$work/cut_merged.json"
