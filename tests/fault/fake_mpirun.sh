#!/usr/bin/env bash
# Stands in for mpirun under run_faults.sh to test its classification of a run without starting
# ranks: prints what the ranks of a kill run print (KILL, one SURVIVOR line per survivor) with
# one survivor missing, and how it went missing (FAKE_MISSING):
#   ucx_assert  UCX aborted it (the line UCX 1.13.1 printed in CI's run of 2026-11-28)
#   silent      it printed nothing (a hang, as far as the harness can tell)
# Usage (as run_faults.sh calls mpirun): fake_mpirun.sh [mpirun options] -np N BINARY --victim V ...
set -u
np=4 victim=0
while (($#)); do
  case $1 in
    -np) np=$2; shift ;;
    --victim) victim=$2; shift ;;
  esac
  shift
done
missing=$(((victim + 1) % np))
echo "KILL 1795894970.558"
for ((r = 0; r < np; ++r)); do
  ((r == victim || r == missing)) && continue
  echo "SURVIVOR rank=$r code=6 at=1795894970.613 later=6 destroy_s=0.011 msg=rank $r: send to rank $victim failed (UCX): Endpoint timeout"
done
if [[ ${FAKE_MISSING:-silent} == ucx_assert ]]; then
  echo "[vm:5915 :0:5952]   uct_iface.h:884  Assertion \`comp->count > 0' failed: comp=0x564ffd5af998 (ucs_empty_function_do_assert_void) count=0 status=-80"
  echo " 0  /lib/x86_64-linux-gnu/libucs.so.0(ucs_handle_error+0x2dc) [0x7fe79e2b9e9c]"
fi
exit 1
