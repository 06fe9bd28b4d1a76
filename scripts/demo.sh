#!/usr/bin/env bash
# The main job: emulated data-parallel training of VGG-19 on a 4-host cluster (network
# namespaces, links shaped with tc), the gradients really all-reduced by prioccl, comparing
# wait-free backprop (wfbp, as PyTorch DDP/Horovod without fusion), P3 (priority + overlap
# with the next forward) and lagged (last-batch gradient overlapped with a whole iteration).
# Prints the throughput/speedup table and the path of a PNG plot. ~2-3 minutes once built.
#
# Environment: PRIOCCL_DEMO_RATES (default 250mbit,500mbit,1gbit), PRIOCCL_DEMO_ITERS (4),
# PRIOCCL_DEMO_OUT (default perf/results/demo-<time>).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
step() { echo "[demo $(date +%H:%M:%S)] $*"; }

step "1/4 dependencies (scripts/setup.sh; installs from Debian's archive when something is missing)"
scripts/setup.sh --test
python=/usr/bin/python3  # Debian's, with python3-matplotlib (not whatever python3 is first on PATH)
step "2/4 building prioccl and the training emulator (build/)"
cmake -S "$root" -B "$root/build" -G Ninja >/dev/null
cmake --build "$root/build" -j "$(nproc)" --target train_emu | tail -n 1

rates=${PRIOCCL_DEMO_RATES:-250mbit,500mbit,1gbit}
iters=${PRIOCCL_DEMO_ITERS:-4}
out=${PRIOCCL_DEMO_OUT:-$root/perf/results/demo-$(date +%Y%m%d-%H%M%S)}
mode_args=(--models vgg19 --modes wfbp,p3,lagged --iters "$iters" --warmup 1 --out "$out")

# The testbed needs root and network namespaces; without them, say why and use loopback.
if why=$(perf/testbed.sh down 2>&1 && perf/testbed.sh up 4 1gbit 2>&1); then
  perf/testbed.sh down >/dev/null
  step "3/4 training VGG-19 on 4 emulated hosts at ${rates} (gradient x 0.05: equivalent to 20x" \
       "those rates for the full model)"
  "$python" perf/sweep --rates "$rates" "${mode_args[@]}"
else
  step "3/4 cannot build the 4-host testbed (${why##*testbed.sh: }); running on loopback instead" \
       "(no bandwidth limit: expect little difference between modes)"
  "$python" perf/sweep --loopback "${mode_args[@]}"
fi
if [[ -f $out/sweep.png ]]; then
  step "4/4 done: speedup table above; plot: $out/sweep.png (data: $out/sweep.csv)"
else
  step "4/4 done: table above (data: $out/sweep.csv; no plot without a bandwidth axis)"
fi
