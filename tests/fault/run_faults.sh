#!/usr/bin/env bash
# Kills one rank (SIGKILL) at each phase of each op kind, --reps times each (the victim rotates
# over the ranks, the coordinator included), and checks every survivor: an error from its pending
# op within PRIOCCL_TIMEOUT_S + 5 s of the kill (or, where its part no longer needed the victim,
# its completion: column "done"), an error from a later op, a prompt destroy. An all-reduce has
# five phases; the other kinds (fault_rank --op) two: before submit, mid op.
# Prints a table and "FAULTS hangs=H late=L wrong=W runs=N stuck_in_mpi=S ucx_aborts=A" (S: runs
# where a rank's waiting thread stayed inside the MPI library and the rank said so; A: runs where
# every survivor that did not report was aborted by an assertion inside UCX itself; see below).
# Usage: run_faults.sh --mpirun M --binary B [--np 4] [--reps 20] [--timeout 3]
#          [--transport mpi|ucx_tcp|mpi-coll] [--ops all_reduce,broadcast,...]
#          [--ranks-per-host K]   (emulated hosts, PRIOCCL_HOST_ID = rank / K: with
#                                  PRIOCCL_ALGO=hier, the two-level all-reduce)
set -uo pipefail
np=4 reps=20 timeout=3 transport=mpi mpirun="" binary="" ops=all_reduce per_host=0
while (($#)); do
  case $1 in
    --mpirun) mpirun=$2 ;;
    --binary) binary=$2 ;;
    --np) np=$2 ;;
    --reps) reps=$2 ;;
    --timeout) timeout=$2 ;;
    --transport) transport=$2 ;;
    --ops) ops=$2 ;;
    --ranks-per-host) per_host=$2 ;;
    *) echo "run_faults.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
export PRIOCCL_TIMEOUT_S=$timeout
case $transport in
  mpi | mpi-coll | tcp) export PRIOCCL_TRANSPORT=$transport ;;
  # Loopback: the testbed's bridge may come and go meanwhile (tests/CMakeLists.txt says why).
  ucx_tcp) export PRIOCCL_TRANSPORT=ucx UCX_TLS=tcp UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo} ;;
  *) echo "run_faults.sh: --transport mpi, tcp, ucx_tcp or mpi-coll" >&2; exit 2 ;;
esac
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# FAULT_LOG_DIR=D: the whole log of every run that lost a survivor is kept there, for the rare
# ones (a survivor lost once in several hundred kills over UCX/TCP) that a summary cannot explain.
keep_log() {
  [[ -n ${FAULT_LOG_DIR:-} ]] || return 0
  mkdir -p "$FAULT_LOG_DIR" && cp "$log" "$FAULT_LOG_DIR/$1.log" &&
    echo "    (whole log: $FAULT_LOG_DIR/$1.log)" >&2
}
hangs=0 late=0 wrong=0 runs=0 stuck=0 ucx_aborts=0
printf '%-15s %-15s %5s %10s %8s %6s %6s %5s %5s %5s  %s\n' op phase runs max_s destroy hangs late done stuck ucx_a "transport=$transport np=$np PRIOCCL_TIMEOUT_S=$timeout${PRIOCCL_ALGO:+ PRIOCCL_ALGO=$PRIOCCL_ALGO}$( ((per_host)) && echo " ranks/host=$per_host")"
phase_index=0
cells=()  # op/phase
for op in ${ops//,/ }; do
  phases="before_submit mid_op"
  [[ $op == all_reduce ]] && phases="before_submit reduce_scatter all_gather preemption lagged_flush"
  for phase in $phases; do cells+=("$op/$phase"); done
done
for cell in "${cells[@]}"; do
  op=${cell%/*} phase=${cell#*/}
  p_hangs=0 p_late=0 p_wrong=0 p_max=0 p_destroy=0 p_done=0 p_stuck=0 p_ucx=0
  for ((rep = 0; rep < reps; ++rep)); do
    victim=$(((rep + phase_index) % np))
    sync=$(mktemp -d)
    launch=("$binary")
    # shellcheck disable=SC2016  # expanded by each rank's shell
    ((per_host > 0)) && launch=(sh -c 'PRIOCCL_HOST_ID=$((OMPI_COMM_WORLD_RANK / '"$per_host"')) exec "$0" "$@"' "$binary")
    timeout $((timeout + 90)) "$mpirun" --mca orte_abort_on_non_zero_status 0 -np "$np" \
      "${launch[@]}" --op "$op" --phase "$phase" --victim "$victim" --sync "$sync" >"$log" 2>&1
    rc=$?
    rm -rf "$sync"
    runs=$((runs + 1))
    kill_at=$(awk '/^KILL /{print $2; exit}' "$log")
    survivors=$(grep -c '^SURVIVOR ' "$log")
    # A rank whose own waiting thread is stuck inside a transport call cannot report: nothing
    # returns that thread (Open MPI's shared-memory transport has been seen spinning in
    # MPI_Testsome after a peer died mid-write). Its progress thread must still fail the
    # communicator within the timeout, naming the call (Engine::failStuck); such a run is counted
    # apart (column "stuck") when every rank that did not report said so, and only for MPI.
    stuck_ranks=$(grep -oE 'rank [0-9]+: [^(]* \([a-z_-]+ transport\) has not returned' "$log" |
      awk '{print $2}' | tr -d : | sort -u)
    unreported=0 unexplained=0
    for ((r = 0; r < np; ++r)); do
      ((r == victim)) || grep -q "^SURVIVOR rank=$r " "$log" && continue
      unreported=$((unreported + 1))
      grep -qx "$r" <<<"$stuck_ranks" || unexplained=$((unexplained + 1))
    done
    # UCX 1.13.1 (Debian 12's) sometimes aborts a survivor from inside its own error handling:
    # "uct_iface.h:884 Assertion `comp->count > 0' failed" when a TCP endpoint to the killed rank
    # fails while a send to it is in flight (a completion delivered twice; seen once in ~150
    # CI kills). prioccl cannot catch an abort() inside UCX, nor avoid the path without giving up
    # peer error handling. Such a run is counted apart (column "ucx_a") when every survivor that
    # did not report was aborted by a UCX assertion (UCX's "[host:pid:...] file.h:N Assertion"
    # line, one distinct pid per such survivor); it is printed in full below all the same.
    ucx_asserted=$(grep -oE '^\[[^]:]+:[0-9]+ *:[0-9]+:[0-9]+\] +[a-z_]+\.(c|h|inl):[0-9]+ +Assertion' "$log" |
      awk -F: '{print $2}' | sort -u | wc -l)
    if [[ -n $kill_at && $transport == mpi* ]] && ((unreported > 0 && unexplained == 0)); then
      p_stuck=$((p_stuck + 1))
      echo "--- $op $phase victim $victim: rank(s) $(echo $stuck_ranks) stuck in a transport call:" >&2
      grep -E 'has not returned|^SURVIVOR' "$log" | head -8 >&2
    elif [[ -n $kill_at && $transport == ucx* ]] && ((rc != 124 && unreported > 0 &&
      ucx_asserted >= unreported)); then
      p_ucx=$((p_ucx + 1))
      echo "--- $op $phase victim $victim: $unreported survivor(s) aborted inside UCX (not prioccl):" >&2
      grep -E '^(KILL|SURVIVOR)|Assertion|ucs_|uct_|ucp_' "$log" | head -20 >&2
      keep_log "$op.$phase.victim$victim.rep$rep"
    elif ((rc == 124)) || [[ -z $kill_at ]] || ((survivors != np - 1)); then
      p_hangs=$((p_hangs + 1))
      echo "--- $op $phase victim $victim: rc=$rc, kill='${kill_at}', $survivors survivors reported" >&2
      # What the ranks said, without mpirun's boilerplate about the killed rank.
      grep -E '^(KILL|SURVIVOR)|PRIOCCL|UCX|rror|ignal|bort|terminate|ssert' "$log" | head -30 >&2
      keep_log "$op.$phase.victim$victim.rep$rep"
      continue
    fi
    # Per survivor: seconds from the kill to its error, its codes, its destroy time.
    # A survivor's pending op may complete (code 0) where its part did not need the victim any
    # more: mid op (e.g. a broadcast leaf that had its data, or an MPI collective's rank whose
    # exchanges were done), in a send/recv ring away from the victim's neighbours, or on another
    # host than the victim's once a hierarchical all-reduce is past the hosts' exchange. Its later
    # op (a collective) must fail all the same, and a completed all-reduce must hold the whole sum
    # (fault_rank's data=ok). In the all-gather phase a flat ring's survivor may complete too: the
    # victim polls its sent bytes every 0.1 ms while its progress thread keeps sending, so on a
    # loaded machine it can die after it sent what the ranks downstream needed (CI, stop 61: rank
    # 0 completed with the whole sum, victim 2, its neighbour 3 still waiting).
    read -r n_late n_wrong n_done max_s max_destroy < <(awk -v k="$kill_at" -v lim=$((timeout + 5)) \
      -v op="$op" -v phase="$phase" -v victim="$victim" -v np="$np" '
      /^SURVIVOR / {
        for (i = 2; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
        # ... or any rank in the all-gather phase that holds the whole sum (on emulated hosts, the
        # ranks on the other host of a hierarchical all-reduce, whose last step is within a host).
        free = v["code"] == 0 && (phase == "mid_op" || (op == "send_recv" &&
               v["rank"] != (victim + 1) % np && v["rank"] != (victim + np - 1) % np) ||
               (phase == "all_gather" && v["data"] == "ok"))
        done += free
        d = v["at"] - k; if (!free && d > max) max = d
        if (!free && d > lim) late++
        if ((v["code"] == 0 && !free) || v["later"] == 0 || v["data"] == "bad") bad++
        if (v["destroy_s"] > dmax) dmax = v["destroy_s"]
        if (v["destroy_s"] > 5) late++
      }
      END { printf "%d %d %d %.2f %.2f\n", late, bad, done, max, dmax }' "$log")
    p_done=$((p_done + n_done))
    if ((n_late + n_wrong > 0)); then
      echo "--- $op $phase victim $victim: late=$n_late wrong=$n_wrong" >&2
      grep '^SURVIVOR\|^KILL' "$log" >&2
    fi
    p_late=$((p_late + n_late)) p_wrong=$((p_wrong + n_wrong))
    p_max=$(awk -v a="$p_max" -v b="$max_s" 'BEGIN{print (b > a) ? b : a}')
    p_destroy=$(awk -v a="$p_destroy" -v b="$max_destroy" 'BEGIN{print (b > a) ? b : a}')
  done
  printf '%-15s %-15s %5d %10s %8s %6d %6d %5d %5d %5d\n' "$op" "$phase" "$reps" "$p_max" "$p_destroy" "$p_hangs" "$p_late" "$p_done" "$p_stuck" "$p_ucx"
  hangs=$((hangs + p_hangs)) late=$((late + p_late)) wrong=$((wrong + p_wrong)) stuck=$((stuck + p_stuck))
  ucx_aborts=$((ucx_aborts + p_ucx))
  phase_index=$((phase_index + 1))
done
# A sample of what survivors are told.
grep -m1 '^SURVIVOR' "$log" | sed 's/^/example: /'
echo "FAULTS hangs=$hangs late=$late wrong=$wrong runs=$runs stuck_in_mpi=$stuck ucx_aborts=$ucx_aborts"
((hangs + late + wrong == 0))
