#!/bin/bash
# Starts a job without mpirun, as torchrun would: one process per rank with RANK, WORLD_SIZE,
# LOCAL_RANK, LOCAL_WORLD_SIZE, and PRIOCCL_COMM_ID (a loopback port) for the unique id.
#   launch_without_mpi.sh PROGRAM NP          every rank must print "LAUNCH rank=R ok", exit 0
#   launch_without_mpi.sh PROGRAM NP missing  rank NP-1 never starts: every other rank must fail
#                                             within PRIOCCL_TIMEOUT_S (3) + 5 s, naming it
#   launch_without_mpi.sh PROGRAM NP killed   every rank joins, then rank NP-1 is killed (SIGKILL)
#                                             while they all-reduce: every other rank must fail
#                                             within PRIOCCL_TIMEOUT_S (3) + 5 s of the kill,
#                                             naming it
#   launch_without_mpi.sh PROGRAM NP shrink   the same kill; every other rank must name it, then
#                                             shrink the communicator without it and finish
#                                             ("LAUNCH rank=R ok", exit 0) within
#                                             PRIOCCL_TIMEOUT_S (3) + 5 s of the kill;
#                                             LAUNCH_VICTIM=R kills rank R instead;
#                                             LAUNCH_SHRINK=live: the survivors are not told
#                                             which rank died (PRIOCCL_SHRINK_TO_LIVE)
# PROGRAM is split at spaces (a program and its arguments). Prints "LAUNCH_RESULT ok=N of=M" (N
# ranks behaved as they must).
set -u
program=$1 np=$2 mode=${3:-all}
. "$(dirname "$0")/../../scripts/lib/listen_port.sh"
port=$(listen_port)
export PRIOCCL_COMM_ID=127.0.0.1:$port WORLD_SIZE=$np LOCAL_WORLD_SIZE=$np
started=$np
if [ "$mode" = missing ]; then
  started=$((np - 1))
  export PRIOCCL_TIMEOUT_S=3
fi
if [ "$mode" = killed ] || [ "$mode" = shrink ]; then
  export PRIOCCL_TIMEOUT_S=3 LAUNCH_LOOP_S=60
fi
[ "$mode" = shrink ] && export LAUNCH_SHRINK=${LAUNCH_SHRINK:-1}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
begin=$(date +%s%N)
pids=()
for ((r = 0; r < started; r++)); do
  # shellcheck disable=SC2086 # PROGRAM may carry arguments ("python3 worker.py")
  RANK=$r LOCAL_RANK=$r timeout -k 5 120 $program > "$dir/out.$r" 2>&1 &
  pids+=($!)
done
victim=${LAUNCH_VICTIM:-$((np - 1))}
if [ "$mode" = killed ] || [ "$mode" = shrink ]; then
  # Every rank joined (its first all-reduce done): then the victim goes, mid-op.
  for ((i = 0; i < 600; i++)); do
    joined=$(cat "$dir"/out.* 2>/dev/null | grep -c "LAUNCH rank=[0-9]* joined")
    [ "$joined" -eq "$np" ] && break
    sleep 0.1
  done
  sleep 0.5
  pkill -KILL -P "${pids[$victim]}"  # the program, not the timeout that runs it
  wait "${pids[$victim]}" 2>/dev/null
  begin=$(date +%s%N)
  echo "killed rank $victim after $joined of $np joined"
  started=$((np - 1))
fi
ok=0
for ((r = 0; r < ${#pids[@]}; r++)); do
  if [ "$mode" = killed ] || [ "$mode" = shrink ]; then [ $r -eq "$victim" ] && continue; fi
  wait "${pids[$r]}"
  code=$?
  elapsed_ms=$((($(date +%s%N) - begin) / 1000000))
  sed "s/^/[rank $r] /" "$dir/out.$r"
  if [ "$mode" = killed ]; then
    if [ $code -ne 0 ] && grep -q "FAILED.*rank $victim\b" "$dir/out.$r" &&
        [ $elapsed_ms -lt 8000 ]; then
      ok=$((ok + 1))
    else
      echo "rank $r: exit $code ${elapsed_ms} ms after the kill without naming rank $victim in time"
    fi
  elif [ "$mode" = shrink ]; then
    if [ $code -eq 0 ] && grep -q "LAUNCH rank=$r lost:.*rank $victim\b" "$dir/out.$r" &&
        grep -q "LAUNCH rank=$r ok" "$dir/out.$r" && [ $elapsed_ms -lt 8000 ]; then
      ok=$((ok + 1))
      echo "rank $r: carried on, done ${elapsed_ms} ms after the kill"
    else
      echo "rank $r: exit $code ${elapsed_ms} ms after the kill: did not name rank $victim and carry on in time"
    fi
  elif [ "$mode" = missing ]; then
    # Rank 0 names the missing rank; the others hear it from rank 0.
    if [ $code -ne 0 ] && grep -q "rank(s) \[$((np - 1))\] of $np did not arrive" "$dir/out.$r" &&
        [ $elapsed_ms -lt 8000 ]; then
      ok=$((ok + 1))
    else
      echo "rank $r: exit $code after ${elapsed_ms} ms without naming rank $((np - 1)) in time"
    fi
  elif [ $code -eq 0 ] && grep -q "LAUNCH rank=$r ok" "$dir/out.$r"; then
    ok=$((ok + 1))
  else
    echo "rank $r: exit $code"
  fi
done
echo "LAUNCH_RESULT ok=$ok of=$started"
[ $ok -eq "$started" ]
