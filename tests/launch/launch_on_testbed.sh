#!/bin/bash
# Jobs started without MPI across the testbed's emulated hosts (perf/testbed.sh), one launcher per
# host as `torchrun --nnodes 3` would (testbed.sh launch: RANK, WORLD_SIZE, MASTER_ADDR, ...):
#   the C ABI's unique-id init (tests/launch/init_rank.c) with PRIOCCL_COMM_ID at host 1's
#   address, over the automatic transport (prioccl's tcp on these slow links) and over UCX/TCP;
#   the torch.distributed backend "prioccl" (python/tests/test_torch_backend.py: every collective,
#   a new_group, DDP against DDP over gloo), the id through torch's store at MASTER_ADDR, and
#   its communicators made with the bulk chunk size (backend.py).
# Usage: launch_on_testbed.sh INIT_RANK_BINARY PYTHON [ucx|no-ucx] (PYTHON -: a sanitizer build,
# no Python part; no-ucx: a build without the UCX transport). Needs root and network namespaces
# (exit 77, CTest's skip, without them). Prints "TESTBED_LAUNCH c_auto=.. c_ucx=.. torch=.." (ok,
# failed, or skipped with the reason), exits 0 only if none failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
testbed=$here/../../perf/testbed.sh
binary=$1 python=${2:-/usr/bin/python3} ucx=${3:-ucx}
if [[ $(id -u) != 0 ]] || ! ip netns add pcclprobe$$ 2>/dev/null; then
  echo "launch_on_testbed.sh: SKIPPED: needs root and network namespaces for the testbed"
  exit 77
fi
ip netns del pcclprobe$$
trap '"$testbed" down >/dev/null 2>&1' EXIT
"$testbed" down >/dev/null 2>&1
"$testbed" up 3 1gbit >/dev/null || exit 1
. "$(dirname "$0")/../../scripts/lib/listen_port.sh"

# $1: name; the rest: the command testbed.sh launch runs. Passes when every rank printed its
# line ($want) and the launch exited 0.
result=()
launch() {
  local name=$1 want=$2 out
  shift 2
  out=$(timeout -k 5 240 "$testbed" launch -- "$@" 2>&1)
  local code=$?
  echo "$out" | sed "s/^/  [$name] /"
  local got
  got=$(grep -c "$want" <<<"$out")
  # The backend's own communicators use bulk chunks on these slow links (the library's default
  # here is 128 KiB): its creation line says so.
  if [[ $name == torch ]] && ! grep -q "PRIOCCL INFO prioccl .* nranks=3 chunkBytes=1048576 " <<<"$out"; then
    echo "  [$name] no communicator of 3 ranks with chunkBytes=1048576 in the log"
    got=0
  fi
  if [[ $code -eq 0 && $got -ge 1 ]]; then result+=("$name=ok"); else result+=("$name=failed"); fi
}
PRIOCCL_COMM_ID=198.18.0.1:$(listen_port) PRIOCCL_CALIBRATE=0 launch c_auto "LAUNCH rank=2 ok" "$binary"
if [[ $ucx == ucx ]]; then
  PRIOCCL_COMM_ID=198.18.0.1:$(listen_port) PRIOCCL_CALIBRATE=0 PRIOCCL_TRANSPORT=ucx UCX_TLS=tcp \
    launch c_ucx "LAUNCH rank=2 ok" "$binary"
else
  echo "  [c_ucx] skipped: this build has no UCX transport"
  result+=("c_ucx=skipped(no-ucx-build)")
fi
if [[ $python == - ]]; then
  # A sanitizer build's library cannot be loaded by an uninstrumented interpreter.
  echo "  [torch] skipped: a sanitizer build (the Python part runs in the plain build's tier)"
  result+=("torch=skipped(sanitizer-build)")
elif "$python" -c 'import torch.distributed' 2>/dev/null; then
  # gloo (the reference DDP run) must use the hosts' own links.
  MASTER_PORT=$(listen_port) GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 PRIOCCL_DEBUG=INFO \
    launch torch "test_torch_backend: all checks passed on 3 ranks" \
    "$python" "$here/../../python/tests/test_torch_backend.py"
else
  result+=("torch=skipped(no-torch)")
fi
echo "TESTBED_LAUNCH ${result[*]}"
[[ " ${result[*]} " != *failed* ]]
