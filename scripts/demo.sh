#!/usr/bin/env bash
# The main job (for now): build prioccl and run a 4-rank all-reduce example under mpirun,
# checked against MPI_Allreduce.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/build.sh" "$root/build" >/dev/null
"$root/scripts/mpirun-local" -np "${PRIOCCL_DEMO_RANKS:-4}" "$root/build/allreduce_example"
