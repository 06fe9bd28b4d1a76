#!/usr/bin/env bash
# Link outages on the testbed (perf/testbed.sh): while outage_rank streams checked all-reduces
# over N emulated hosts, one host's link is taken down (`ip link set dev pcclvH down`) and brought
# back up. The host rotates over all of them, the coordinator's (rank 0) included.
#   short: down SHORT s with PRIOCCL_TIMEOUT_S=SHORT_TIMEOUT (> SHORT): every rank must finish
#          every op with the right bits, and exit 0.
#   long:  down LONG s with PRIOCCL_TIMEOUT_S=LONG_TIMEOUT (< LONG): every rank must fail with
#          priocclTimeout or priocclRemoteError within LONG_TIMEOUT + 5 s of the outage's start,
#          the others' messages naming the cut-off rank, destroy in <= 5 s, and exit 0.
# Prints a table and "OUTAGES transport=T short_ok=A/B long_ok=C/D"; exits non-zero unless all
# runs passed. Needs root (it brings the testbed up, and down again at the end).
# Usage: run_outages.sh --binary B [--transport mpi|tcp|ucx_tcp] [--reps 20] [--hosts 4]
#          [--rate 1gbit] [--short 2] [--short-timeout 10] [--long 20] [--long-timeout 5]
#          [--cases short,long] [--keep DIR]   (DIR: the full logs of failed runs)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
testbed=$here/../../perf/testbed.sh
binary="" transport=mpi reps=20 hosts=4 rate=1gbit
short=2 short_timeout=10 long=20 long_timeout=5 cases=short,long keep=""
while (($#)); do
  case $1 in
    --binary) binary=$2 ;;
    --transport) transport=$2 ;;
    --reps) reps=$2 ;;
    --hosts) hosts=$2 ;;
    --rate) rate=$2 ;;
    --short) short=$2 ;;
    --short-timeout) short_timeout=$2 ;;
    --long) long=$2 ;;
    --long-timeout) long_timeout=$2 ;;
    --cases) cases=$2 ;;
    --keep) keep=$2 ;;
    *) echo "run_outages.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -x $binary ]] || { echo "run_outages.sh: --binary must name outage_rank" >&2; exit 2; }
# The testbed needs network namespaces: without them, skip (77: CTest's SKIP_RETURN_CODE).
if [[ $(id -u) != 0 ]] || ! ip netns add pcclprobe$$ 2>/dev/null; then
  echo "run_outages.sh: SKIPPED: needs root and network namespaces for the testbed"
  exit 77
fi
ip netns del pcclprobe$$
case $transport in
  mpi | tcp) export PRIOCCL_TRANSPORT=$transport ;;
  # UCX's shared memory would bypass the emulated links (all ranks share one kernel).
  ucx_tcp) export PRIOCCL_TRANSPORT=ucx UCX_TLS=tcp ;;
  *) echo "run_outages.sh: --transport mpi, tcp or ucx_tcp" >&2; exit 2 ;;
esac
"$testbed" up "$hosts" "$rate" >/dev/null || exit 1
work=$(mktemp -d)
trap '"$testbed" down >/dev/null 2>&1; rm -rf "$work"' EXIT

# Waits (up to $2 s) until $1 files match the glob $3.
wait_files() {
  local n=$1 secs=$2 glob=$3 i
  for ((i = 0; i < secs * 50; i++)); do
    # shellcheck disable=SC2086  # the glob is meant to expand
    (($(ls $glob 2>/dev/null | wc -l) >= n)) && return 0
    sleep 0.02
  done
  return 1
}

printf '%-6s %5s %5s %9s %9s %9s  %s\n' case runs ok fail_s_max ops_min destroy_s "transport=$transport hosts=$hosts rate=$rate"
total_short=0 ok_short=0 total_long=0 ok_long=0 all_ok=1
for kind in short long; do
  [[ ,$cases, == *,$kind,* ]] || continue
  if [[ $kind == short ]]; then down=$short timeout=$short_timeout; else down=$long timeout=$long_timeout; fi
  c_ok=0 c_fail_max=0 c_ops_min="" c_destroy=0
  for ((rep = 0; rep < reps; ++rep)); do
    host=$((rep % hosts + 1)) victim=$((rep % hosts))
    sync=$work/$kind$rep.sync log=$work/$kind$rep.log
    mkdir -p "$sync"
    PRIOCCL_TIMEOUT_S=$timeout timeout $((down + timeout + 120)) "$testbed" run -- "$binary" --sync "$sync" >"$log" 2>&1 &
    pid=$!
    verdict=ok
    if ! wait_files "$hosts" 60 "$sync/ready.*"; then verdict="never ready"; fi
    sleep 1  # mid-op
    down_at=$(date +%s.%N)
    ip link set dev "pcclv$host" down
    sleep "$down"
    ip link set dev "pcclv$host" up
    if [[ $kind == short ]]; then sleep 2; fi  # ops run again over the restored link
    touch "$sync/stop" "$sync/restored"
    wait "$pid"
    rc=$?
    lines=$(grep -c '^OUTAGE ' "$log")
    if [[ $verdict == ok ]] && ((rc != 0 || lines != hosts)); then verdict="rc=$rc, $lines of $hosts ranks reported"; fi
    if [[ $verdict == ok ]]; then
      # Per rank: its verdict against this case's rule; the run's worst failure time, fewest ops,
      # slowest destroy.
      read -r fail_s ops_min destroy_s bad < <(awk -v kind="$kind" -v down="$down_at" \
        -v lim=$((timeout + 5)) -v victim="$victim" '
        /^OUTAGE / {
          for (i = 2; i <= 7; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
          msg = $0; sub(/.* msg=/, "", msg)
          if (ops == "" || v["ops"] < ops) ops = v["ops"]
          if (v["destroy_s"] > dmax) dmax = v["destroy_s"]
          if (v["destroy_s"] > 5) bad = bad " destroy=" v["destroy_s"]
          if (kind == "short") {
            if (v["code"] != 0 || v["wrong"] != 0) bad = bad " rank" v["rank"] ":code=" v["code"] ",wrong=" v["wrong"]
          } else {
            d = v["at"] - down; if (d > fmax) fmax = d
            if (v["code"] != 6 && v["code"] != 8) bad = bad " rank" v["rank"] ":code=" v["code"]
            if (d > lim) bad = bad " rank" v["rank"] ":late=" d
            # "rank V", or V in a list: "waiting for data from rank(s) 1, V".
            if (v["rank"] != victim && msg !~ ("rank(\\(s\\))? ([0-9]+, )*" victim "([^0-9]|$)"))
              bad = bad " rank" v["rank"] ":names-not-" victim
          }
        }
        END { printf "%.2f %s %.3f %s\n", fmax, ops, dmax, bad }' "$log")
      [[ -z $bad ]] || verdict=$bad
      c_fail_max=$(awk -v a="$c_fail_max" -v b="$fail_s" 'BEGIN{print (b > a) ? b : a}')
      c_destroy=$(awk -v a="$c_destroy" -v b="$destroy_s" 'BEGIN{print (b > a) ? b : a}')
      if [[ -z $c_ops_min ]] || ((ops_min < c_ops_min)); then c_ops_min=$ops_min; fi
    fi
    if [[ $verdict == ok ]]; then
      c_ok=$((c_ok + 1))
    else
      all_ok=0
      echo "--- $kind rep $rep (host $host, rank $victim cut off): $verdict" >&2
      grep -E '^OUTAGE|rror|ignal|bort|UCX' "$log" | head -12 >&2
      [[ -n $keep ]] && mkdir -p "$keep" && cp "$log" "$keep/$transport.$kind.$rep.log"
    fi
  done
  printf '%-6s %5d %5d %9s %9s %9s  link down %ss, PRIOCCL_TIMEOUT_S=%s\n' "$kind" "$reps" "$c_ok" \
    "$( [[ $kind == long ]] && echo "$c_fail_max" || echo -)" "${c_ops_min:--}" "$c_destroy" "$down" "$timeout"
  if [[ $kind == short ]]; then total_short=$reps ok_short=$c_ok; else total_long=$reps ok_long=$c_ok; fi
  example=$(grep -h -m1 "^OUTAGE rank=$(((victim + 1) % hosts)) " "$work/$kind"*.log 2>/dev/null | tail -1)
  [[ $kind == long && -n $example ]] && echo "example: $example"
done
echo "OUTAGES transport=$transport short_ok=$ok_short/$total_short long_ok=$ok_long/$total_long"
((all_ok))
