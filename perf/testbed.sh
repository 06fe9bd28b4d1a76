#!/usr/bin/env bash
# Emulates N bandwidth-limited hosts on one machine, so prioccl's collectives can be measured over a
# network whose link rate is known, instead of over loopback or shared memory (which are far faster
# than any NIC and hide the algorithms' bandwidth behaviour).
#
#   root namespace:  bridge pcclbr0 198.18.0.254/24
#                      |-- pcclv1 (tbf = host 1's ingress) <veth> eth0 198.18.0.1/24 in netns pccl1 (tbf = egress)
#                      |-- pcclv2 ...                      <veth> eth0 198.18.0.2/24 in netns pccl2
#                      ...
# Every host's traffic crosses its own eth0 (egress tbf) and the receiving host's pcclvN (ingress
# tbf), so each host is limited to RATE in each direction, full duplex, like a NIC on a switch.
# Only 198.18.0.0/24 (RFC 2544 benchmarking range) is used; nothing else on the host is touched.
#
# Usage:
#   perf/testbed.sh up N RATE [DELAY] [--ranks-per-host K] [--cc NAME]
#                                         create hosts pccl1..pcclN (RATE: 1gbit, 100mbit...; DELAY: 1ms);
#                                         'run' then starts K ranks on each (default 1); their TCP
#                                         uses congestion control NAME (default cubic; 'system':
#                                         the machine's default, which may be bbr)
#   perf/testbed.sh down                  remove everything 'up' made (succeeds when nothing exists)
#   perf/testbed.sh status                hosts, addresses, qdiscs
#   perf/testbed.sh run [-n K] [-x VAR[=VAL] ...] -- CMD [ARGS...]
#                                         mpirun, K ranks per host (ranks (i-1)K..iK-1 in pccl<i>, each
#                                         with hostname pccl<i> in a UTS namespace of its own; -n H: only
#                                         the first H hosts); -x VARs and the caller's PRIOCCL_* variables
#                                         reach the ranks
#   perf/testbed.sh launch [-n H] -- CMD [ARGS...]
#                                         without MPI, one launcher per host as torchrun --nnodes H
#                                         would: K processes in each host (hostname pccl<i>) with
#                                         torchrun's contract (RANK, WORLD_SIZE, LOCAL_RANK,
#                                         LOCAL_WORLD_SIZE, MASTER_ADDR=198.18.0.1, MASTER_PORT;
#                                         set MASTER_PORT or PRIOCCL_COMM_ID to choose); output
#                                         "[rank R] ...", exit status the first failure's
#   perf/testbed.sh selftest              per-flow TCP throughput pccl1 -> pccl2 and a 2-rank MPI launch
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/listen_port.sh"

readonly NS_PREFIX=pccl BRIDGE=pcclbr0 VETH_PREFIX=pcclv
readonly SUBNET=198.18.0 BRIDGE_ADDR=198.18.0.254 PREFIXLEN=24
readonly MAX_HOSTS=200   # host addresses .1-.200; .254 is the bridge
# What 'up' was asked for that 'run' needs: the ranks per host (removed by 'down').
readonly STATE_FILE=/run/prioccl-testbed.ranks-per-host

die() { echo "testbed.sh: $*" >&2; exit 1; }
usage() { sed -n '/^# Usage:/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

need_tools() {
  command -v ip >/dev/null && command -v tc >/dev/null \
    || die "needs 'ip' and 'tc' (Debian package iproute2; scripts/setup.sh installs it)"
}

# Namespaces, bridges and qdiscs need CAP_SYS_ADMIN + CAP_NET_ADMIN; say so in one line rather than
# leaving a half-built testbed behind.
need_privilege() {
  [[ $(id -u) == 0 ]] || die "must run as root (needs CAP_SYS_ADMIN and CAP_NET_ADMIN to create network namespaces)"
  local probe=${NS_PREFIX}probe$$ err
  if ! err=$(ip netns add "$probe" 2>&1); then
    die "cannot create network namespaces ('ip netns add' failed: ${err//$'\n'/ }; needs CAP_SYS_ADMIN and CAP_NET_ADMIN)"
  fi
  ip netns del "$probe"
}

# Hosts are the namespaces pccl1, pccl2, ... counted up to the first gap.
host_count() {
  local n=0 list
  list=$(ip netns list 2>/dev/null | awk '{print $1}')
  while grep -qx "${NS_PREFIX}$((n + 1))" <<<"$list"; do n=$((n + 1)); done
  echo "$n"
}

# RATE in tc syntax -> bytes per second (tc: "bit" units are bits/s, "bps" units are BYTES/s, SI
# prefixes, and the IEC ones kibit/mibit/gibit/... too).
rate_bytes_per_s() {
  local r=${1,,} num unit mult
  [[ $r =~ ^([0-9]+(\.[0-9]+)?)([kmgt]?i?)(bit|bps)$ ]] || die "bad RATE '$1' (expected e.g. 1gbit, 100mbit, 2.5gbit)"
  num=${BASH_REMATCH[1]} unit=${BASH_REMATCH[3]}
  case $unit in
    "") mult=1 ;; k) mult=1e3 ;; m) mult=1e6 ;; g) mult=1e9 ;; t) mult=1e12 ;;
    ki) mult=1024 ;; mi) mult=1048576 ;; gi) mult=1073741824 ;; ti) mult=1099511627776 ;;
    *) die "bad RATE '$1'" ;;
  esac
  if [[ ${BASH_REMATCH[4]} == bit ]]; then
    awk -v n="$num" -v m="$mult" 'BEGIN { printf "%.0f", n * m / 8 }'
  else
    awk -v n="$num" -v m="$mult" 'BEGIN { printf "%.0f", n * m }'
  fi
}

# Token bucket size: 1 ms worth of RATE, at least 32 KiB. tbf refills the bucket from a qdisc
# watchdog timer, so the bucket must cover the time between dequeues (timer slack, softirq latency on a
# busy box); measured here per TCP flow at 1gbit: 16 KiB -> 0.69, 64 KiB -> 0.78, 125 KB (1 ms)
# -> 0.957 Gbit/s, which is the goodput ceiling (1448 payload bytes per 1514 on the wire). The 32 KiB
# floor keeps low rates from degenerating to a few packets per bucket (100mbit: 0.096 Gbit/s). A larger
# bucket would only let short messages through at unshaped speed and blur latency measurements.
tbf_burst() {
  local bps=$1
  awk -v b="$bps" 'BEGIN { x = b / 1000; if (x < 32768) x = 32768; printf "%.0f", x }'
}

# tbf on DEV (in namespace NS, "" = root): rate-limit, with an optional netem delay as tbf's child
# queue (packets wait DELAY in netem, then leave at RATE through the bucket: latency added, rate kept).
add_shaper() {
  local ns=$1 dev=$2 rate=$3 burst=$4 delay=$5 netem_limit=$6
  local -a ipx=()
  [[ -n $ns ]] && ipx=(ip netns exec "$ns")
  # latency 20ms bounds the tbf queue (rate * 20ms + burst, 2.5 MB at 1 Gbit/s): deep enough for a
  # TCP flow to keep the link busy, shallow enough that queueing delay stays in the tens of ms.
  "${ipx[@]}" tc qdisc replace dev "$dev" root handle 1: tbf rate "$rate" burst "$burst" latency 20ms
  if [[ -n $delay ]]; then
    "${ipx[@]}" tc qdisc add dev "$dev" parent 1:1 handle 10: netem delay "$delay" limit "$netem_limit" \
      || die "cannot add netem delay on $dev${ns:+ in $ns} (kernel without sch_netem?)"
  fi
}

# TCP congestion control NAME for host NS's connections (ADDR: its address), as route metrics, so
# that nothing outside the testbed changes (a namespace may not set its own default, and the root
# namespace's default is the machine's). Why it is pinned: this machine's default is bbr, whose
# model of the path misreads a tbf shaper on a loaded 2-core machine. Measured 2026-12-01, 8 hosts
# at 500mbit, 64 MiB all-reduce (simulator: 1.98 s): bbr 2.0-4.3 s, a link falling from its full
# rate to about 40% of it in mid-op for seconds; cubic 1.98-1.99 s. 'system' keeps the default.
set_congestion_control() {
  local ns=$1 addr=$2 cc=$3
  [[ $cc == system ]] && return 0
  ip netns exec "$ns" ip route replace "$SUBNET.0/$PREFIXLEN" dev eth0 proto kernel scope link src "$addr" \
    congctl "$cc"
  # The host's own address (ranks of one host connecting to each other over TCP).
  ip netns exec "$ns" ip route replace local "$addr" dev eth0 table local proto kernel scope host \
    src "$addr" congctl "$cc"
}

cmd_down() {
  need_tools
  local ns
  # Deleting a namespace destroys its eth0 and with it the root-side peer (pcclprobe<pid>: a
  # need_privilege probe left by a killed run).
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NS_PREFIX}(probe)?[0-9]+\$" || true); do
    ip netns del "$ns"
  done
  # Leftovers from an interrupted 'up' (root-side veth whose peer never left the root namespace).
  local dev
  for dev in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' \
               | grep -E "^${VETH_PREFIX}[0-9]+\$" || true); do
    ip link del "$dev" 2>/dev/null || true
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
  rm -f "$STATE_FILE"
}

cmd_up() {
  local -a pos=()
  local per_host=1 cc=cubic
  while (($#)); do
    case $1 in
      --ranks-per-host) (($# >= 2)) || usage; per_host=$2; shift 2 ;;
      --cc) (($# >= 2)) || usage; cc=$2; shift 2 ;;
      *) pos+=("$1"); shift ;;
    esac
  done
  set -- "${pos[@]}"
  (($# >= 2 && $# <= 3)) || usage
  local n=$1 rate=$2 delay=${3:-}
  [[ $per_host =~ ^[0-9]+$ ]] && ((per_host >= 1 && per_host <= 64)) || die "--ranks-per-host must be 1..64, got '$per_host'"
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= MAX_HOSTS)) || die "N must be 1..$MAX_HOSTS, got '$n'"
  [[ -z $delay || $delay =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || die "bad DELAY '$delay' (expected e.g. 1ms, 200us)"
  if [[ $cc != system ]]; then
    grep -qw -- "$cc" /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null \
      || die "--cc $cc: not one of this kernel's ($(cat /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null)) or 'system'"
  fi
  need_tools
  need_privilege
  local bps burst netem_limit=""
  bps=$(rate_bytes_per_s "$rate")
  burst=$(tbf_burst "$bps")
  # With netem as tbf's child, netem's packet limit is the queue: size it like tbf's own (20 ms of
  # rate) plus the packets in flight during DELAY, in MTU-sized packets, at least netem's default 1000.
  if [[ -n $delay ]]; then
    netem_limit=$(awk -v b="$bps" -v d="$delay" 'BEGIN { s = d + 0; if (d ~ /us$/) s /= 1e6; else if (d ~ /ms$/) s /= 1e3;
                                                        x = b * (s + 0.02) / 1500; if (x < 1000) x = 1000; printf "%.0f", x }')
  fi
  # Idempotent: whatever exists (any N, any rate) is removed and rebuilt from scratch.
  cmd_down
  # Any failure below (set -e or die) leaves nothing half-built behind.
  up_done=0
  trap '[[ $up_done == 1 ]] || { echo "testbed.sh: up failed; removing the partial testbed" >&2; cmd_down; }' EXIT

  ip link add "$BRIDGE" type bridge
  ip addr add "$BRIDGE_ADDR/$PREFIXLEN" dev "$BRIDGE"
  ip link set "$BRIDGE" up

  local i ns veth
  for ((i = 1; i <= n; i++)); do
    ns=${NS_PREFIX}$i veth=${VETH_PREFIX}$i
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$BRIDGE"
    ip link set "$veth" up
    ip netns exec "$ns" ip addr add "$SUBNET.$i/$PREFIXLEN" dev eth0
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip link set eth0 up
    set_congestion_control "$ns" "$SUBNET.$i" "$cc"
    add_shaper "$ns" eth0 "$rate" "$burst" "$delay" "$netem_limit"   # host egress
    add_shaper "" "$veth" "$rate" "$burst" "$delay" "$netem_limit"   # host ingress
  done
  echo "$per_host" >"$STATE_FILE"
  up_done=1
  echo "testbed: $n hosts ${NS_PREFIX}1..${NS_PREFIX}$n, $per_host rank(s) each, on $SUBNET.0/$PREFIXLEN, $rate each way" \
       "(tbf burst $burst B)${delay:+, netem delay $delay each way per host}, TCP congestion control" \
       "$([[ $cc == system ]] && echo "$(cat /proc/sys/net/ipv4/tcp_congestion_control) (the machine's)" || echo "$cc")"
}

cmd_status() {
  need_tools
  local n i
  n=$(host_count)
  if ((n == 0)); then echo "testbed: down"; return 0; fi
  echo "testbed: $n hosts; bridge $BRIDGE $(ip -4 -o addr show dev "$BRIDGE" 2>/dev/null | awk '{print $4}')"
  for ((i = 1; i <= n; i++)); do
    echo "${NS_PREFIX}$i: eth0 $(ip netns exec "${NS_PREFIX}$i" ip -4 -o addr show dev eth0 | awk '{print $4}')," \
         "TCP $(ip netns exec "${NS_PREFIX}$i" ip route show "$SUBNET.0/$PREFIXLEN" | grep -o 'congctl [a-z0-9_]*' \
                || echo "congctl $(cat /proc/sys/net/ipv4/tcp_congestion_control) (the machine's)")"
    ip netns exec "${NS_PREFIX}$i" tc qdisc show dev eth0 | sed 's/^/  egress  /'
    tc qdisc show dev "${VETH_PREFIX}$i" | sed 's/^/  ingress /'
  done
}

# Open MPI 4.1 flags for running across the namespaces. The ranks are all local children of mpirun
# (no orted, so no oob_tcp_if_include is needed); what matters is that they reach mpirun's PMIx server
# and that their bytes take the emulated network.
# shellcheck disable=SC2054  # "tcp,self" is one mpirun argument
MPIRUN_BASE=(
  mpirun --allow-run-as-root --oversubscribe
  # PMIx server address: by default mpirun's PMIx server listens on the root namespace's loopback,
  # which no other namespace can reach (MPI_Init fails: "OPAL ERROR: Unreachable in file
  # ext3x_client.c"). It must listen on the bridge; that is read from mpirun's OWN environment
  # (exported in cmd_run), -x alone does not work; -x only hands the setting to the ranks as well.
  -x PMIX_MCA_ptl_tcp_if_include
  # Bytes over TCP only: all ranks share a hostname and /dev/shm, so vader (shared memory) would
  # silently bypass the emulated links (measured: busbw 7.9 Gbit/s on a 1gbit testbed).
  --mca btl tcp,self --mca btl_tcp_if_include "$SUBNET.0/$PREFIXLEN"
  # UCX (pml ucx, osc ucx) would likewise use shared memory / CMA between the ranks, pml cm would
  # use libfabric. Debian's /etc/openmpi/openmpi-mca-params.conf already excludes UCX; these keep
  # it so with other Open MPI builds or configurations (osc list = Debian's, ^ucx,pt2pt).
  --mca pml ob1 --mca osc "^ucx,pt2pt"
  # More ranks than cores: yield while waiting instead of spinning.
  --mca mpi_yield_when_idle 1
)

# How a process of host i starts (run's ranks, launch's processes): `ip netns exec pccl<i>
# unshare --uts -- sh -c "$SET_HOST" pccl<i> CMD...` gives it the hostname of its emulated host in
# a UTS namespace of its own, so that prioccl (and anything else that asks gethostname) tells the
# hosts apart: they share one kernel, so MPI's shared-memory grouping would see a single node.
# shellcheck disable=SC2016  # expanded by each process's shell
readonly SET_HOST='echo "$0" >/proc/sys/kernel/hostname && exec "$@"'

# Ranks per host, as 'up' was asked (1 when it was not said).
ranks_per_host() {
  if [[ -r $STATE_FILE ]]; then cat "$STATE_FILE"; else echo 1; fi
}

# The hosts a run or launch uses: all that are up, or the first NP (-n); dies naming the problem.
hosts_to_use() {
  local np=$1 n
  n=$(host_count)
  ((n >= 1)) || die "testbed is down (no namespace ${NS_PREFIX}1); run 'perf/testbed.sh up N RATE' first"
  if [[ -n $np ]]; then
    [[ $np =~ ^[0-9]+$ ]] && ((np >= 1 && np <= n)) || die "-n must be 1..$n (hosts up), got '$np'"
    n=$np
  fi
  echo "$n"
}

cmd_run() {
  local -a xs=()
  local np=""
  while (($#)); do
    case $1 in
      -x)
        (($# >= 2)) || usage
        # mpirun applies "-x VAR=VAL" to the first MPMD app context only (rank 0), while "-x VAR"
        # reaches every rank: set VAL here and forward the name.
        [[ ${2%%=*} =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "bad -x '$2' (expected VAR or VAR=VALUE)"
        if [[ $2 == *=* ]]; then export "${2%%=*}=${2#*=}"; fi
        xs+=(-x "${2%%=*}"); shift 2 ;;
      -n) (($# >= 2)) || usage; np=$2; shift 2 ;;
      --) shift; break ;;
      *) usage ;;
    esac
  done
  (($# >= 1)) || usage
  need_tools
  local n i v
  n=$(hosts_to_use "$np") || exit 1
  local per_host
  per_host=$(ranks_per_host)
  for v in $(compgen -e | grep '^PRIOCCL_' || true); do xs+=(-x "$v"); done
  # The PMIx server in mpirun reads its own environment, so the variable is set there too.
  export PMIX_MCA_ptl_tcp_if_include=$BRIDGE
  local -a cmd=("${MPIRUN_BASE[@]}" "${xs[@]}")
  # Each rank in its host's namespaces (SET_HOST). Ranks of one host share its network
  # namespace, so their traffic between them is loopback (unshaped) and across hosts crosses the
  # shaped links.
  for ((i = 1; i <= n; i++)); do
    ((i > 1)) && cmd+=(:)
    cmd+=(-np "$per_host" ip netns exec "${NS_PREFIX}$i" unshare --uts -- sh -c "$SET_HOST"
          "${NS_PREFIX}$i" "$@")
  done
  exec "${cmd[@]}"
}

cmd_launch() {
  local np=""
  while (($#)); do
    case $1 in
      -n) (($# >= 2)) || usage; np=$2; shift 2 ;;
      --) shift; break ;;
      *) usage ;;
    esac
  done
  (($# >= 1)) || usage
  need_tools
  local n per_host i k rank rc status=0
  n=$(hosts_to_use "$np") || exit 1
  per_host=$(ranks_per_host)
  export WORLD_SIZE=$((n * per_host)) LOCAL_WORLD_SIZE=$per_host MASTER_ADDR=$SUBNET.1
  export MASTER_PORT=${MASTER_PORT:-$(listen_port)}
  local -a pids=()
  for ((i = 1; i <= n; i++)); do
    for ((k = 0; k < per_host; k++)); do
      rank=$(((i - 1) * per_host + k))
      RANK=$rank LOCAL_RANK=$k ip netns exec "${NS_PREFIX}$i" unshare --uts -- sh -c "$SET_HOST" \
        "${NS_PREFIX}$i" "$@" > >(sed -u "s/^/[rank $rank] /") 2>&1 &
      pids+=($!)
    done
  done
  for i in "${pids[@]}"; do
    rc=0
    wait "$i" || rc=$?
    ((rc != 0 && status == 0)) && status=$rc
  done
  wait  # the output filters
  return "$status"
}

# A tiny throughput probe (no network tools needed): the receiver counts bytes from the first byte to
# EOF; the sender streams for SECONDS. Both are bounded by timeout.
readonly PY_RECV='
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); s.settimeout(10)
c, _ = s.accept(); c.settimeout(10)
buf = bytearray(1 << 20); n = 0; t0 = None
while True:
    k = c.recv_into(buf)
    if not k: break
    if t0 is None: t0 = time.monotonic()
    n += k
dt = time.monotonic() - t0
print("%.3f Gbit/s (%d MB in %.2f s)" % (n * 8 / dt / 1e9, n // 1000000, dt))
'
readonly PY_SEND='
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
buf = b"\0" * (1 << 20); end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end: c.sendall(buf)
c.close()
'

cmd_selftest() {
  need_tools
  local n py port=5201 secs=3
  n=$(host_count)
  ((n >= 2)) || die "selftest needs the testbed up with at least 2 hosts ('perf/testbed.sh up 2 1gbit')"
  py=$(command -v python3) || die "selftest needs python3"
  echo "flow ${NS_PREFIX}1 -> ${NS_PREFIX}2 ($SUBNET.2:$port), ${secs} s:"
  local out result
  out=$(mktemp)
  timeout 20 ip netns exec "${NS_PREFIX}2" "$py" -c "$PY_RECV" "$SUBNET.2" "$port" >"$out" &
  local rpid=$!
  # Wait (bounded) until the receiver listens.
  for _ in $(seq 50); do
    ip netns exec "${NS_PREFIX}2" ss -ltnH "sport = :$port" 2>/dev/null | grep -q . && break
    sleep 0.1
  done
  timeout $((secs + 10)) ip netns exec "${NS_PREFIX}1" "$py" -c "$PY_SEND" "$SUBNET.2" "$port" "$secs" \
    || { kill "$rpid" 2>/dev/null; rm -f "$out"; die "sender failed"; }
  wait "$rpid" || { rm -f "$out"; die "receiver failed"; }
  echo "  $(cat "$out")"
  rm -f "$out"
  echo "MPI launch, the ranks of ${NS_PREFIX}1 and ${NS_PREFIX}2:"
  # shellcheck disable=SC2016  # expanded by each rank's shell
  result=$(timeout 60 "$0" run -n 2 -- bash -c \
    'echo "  rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE in $(ip netns identify) ($(ip -4 -o addr show dev eth0 | awk "{print \$4}"), hostname $(hostname))"') \
    || die "MPI launch failed"
  sort <<<"$result"
  # The launch above never calls MPI_Init; the PMIx and TCP-btl settings only matter once it does.
  # With mpicc at hand, prove that too: MPI_Init, a message over the emulated link, MPI_Finalize.
  if command -v mpicc >/dev/null; then
    local dir
    dir=$(mktemp -d)
    cat >"$dir/hello.c" <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int rank, size, token = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0) { token = 42; MPI_Send(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD); }
  if (rank == 1) MPI_Recv(&token, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  printf("  MPI rank %d of %d: MPI_Init ok, token %d\n", rank, size, token);
  MPI_Finalize();
  return rank != 1 || token == 42 ? 0 : 1;
}
C
    if ! mpicc -o "$dir/hello" "$dir/hello.c" || ! result=$(timeout 60 "$0" run -n 2 -- "$dir/hello"); then
      rm -rf "$dir"; die "MPI program across namespaces failed"
    fi
    rm -rf "$dir"
    sort <<<"$result"
  fi
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down)
    shift; (($# == 0)) || usage
    [[ $(id -u) == 0 ]] || die "must run as root (needs CAP_SYS_ADMIN and CAP_NET_ADMIN to remove network namespaces)"
    cmd_down; echo "testbed: down" ;;
  status) cmd_status ;;
  run) shift; cmd_run "$@" ;;
  launch) shift; cmd_launch "$@" ;;
  selftest) cmd_selftest ;;
  *) usage ;;
esac
