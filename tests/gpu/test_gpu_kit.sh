#!/usr/bin/env bash
# The GPU kit on this machine, so that it cannot rot between GPU runs: packs it from the test
# suite's own build (scripts/gpu-kit.sh checks that every binary resolves its libraries inside the
# kit or from the base/GPU libraries, and the size), then runs DIR/run.sh --cpu: the same flow as on
# a GPU machine, on the fake device. Where a mount namespace can be made (root), the system's
# Open MPI, PMIx and UCX are hidden from the run, as on a bare GPU machine.
#   test_gpu_kit.sh BUILD_DIR [PYTHON]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$1
python=${2:-python3}
kit=$build/gpu-kit-test
# The Python half of the flow needs torch (on CPU tensors here): without it, say so and skip.
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "SKIPPED: $python has no torch (scripts/setup.sh --test installs python3-torch)"
  exit 77
fi
out=$build/gpu-kit-test-out
rm -rf "$out"
bash "$root/scripts/gpu-kit.sh" pack "$kit" --build "$build"
hide=()
libdir=/usr/lib/x86_64-linux-gnu
if [[ $(id -u) == 0 ]] && unshare -m true 2>/dev/null; then
  # Inside a private mount namespace: empty directories and files over the system's copies.
  hider=$build/gpu-kit-hide.sh
  cat >"$hider" <<HIDE
set -e
mkdir -p /tmp/gpu-kit-empty-dir
: >/tmp/gpu-kit-empty-file
for d in $libdir/openmpi $libdir/pmix2 /usr/share/openmpi $libdir/ucx /etc/openmpi; do
  [[ -d \$d ]] && mount --bind /tmp/gpu-kit-empty-dir \$d
done
for f in $libdir/lib{mpi,open-pal,open-rte,pmix,ucp,ucs,uct,ucm,hwloc,event_core-2.1,munge}.so.*[0-9] /usr/bin/orted /usr/bin/orterun; do
  [[ -f \$f ]] && mount --bind /tmp/gpu-kit-empty-file \$f
done
exec "\$@"
HIDE
  hide=(unshare -m bash "$hider")
  echo "test_gpu_kit: the system's Open MPI, PMIx and UCX hidden from the run"
else
  echo "test_gpu_kit: not root or no mount namespaces: the system's Open MPI stays visible"
fi
PYTHON=$python "${hide[@]}" "$kit/run.sh" "$out" --cpu
# The fake-device checks must have run and passed (a kit that skips everything proves nothing).
passed=$(grep -c '| device_buffers\.[a-z_]*\.np[0-9] | pass |' "$out/gpu-report.md" || true)
if ((passed < 6)); then
  echo "FAIL: only $passed of the 6 device-buffer checks passed in $out/gpu-report.md" >&2
  exit 1
fi
grep -q '| python_cuda.mpi.np2 | pass |' "$out/gpu-report.md" ||
  { echo "FAIL: the Python flow did not pass on CPU tensors" >&2; exit 1; }
echo "test_gpu_kit: OK ($passed device-buffer checks passed; GPU checks skipped, saying why)"
