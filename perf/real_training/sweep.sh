#!/usr/bin/env bash
# Real models trained side by side on the testbed: compute alone, DDP over gloo and prioccl's
# variants, at several link rates, in one sitting (perf/real_training/train.py; issue 41).
#
# Usage: perf/real_training/sweep.sh [options]
#   --rates "100mbit 300mbit 1gbit 3gbit"    link rates (perf/testbed.sh up's RATE)
#   --models "resnet18 resnet50 mobilenet_v2 transformer"
#   --variants "compute gloo sync p3 lagged ddp_prioccl"
#   --hosts 4          emulated hosts, one rank each
#   --reps 3           runs of each (model, variant) per rate, interleaved (rep 1 of every
#                      variant, then rep 2, ...) so that a noisy minute hits all variants alike
#   --steps 10 --warmup 3 --batch 16 --image 32    passed to train.py
#   --out DIR          results.txt (train.py's lines), table.md, sweep.png (default
#                      perf/real_training/out-<date>)
# Needs root (network namespaces), a built libprioccl (build/) and torch + torchvision in
# /usr/bin/python3 (scripts/setup.sh installs them). Every setting is the libraries' default:
# set PRIOCCL_* in the environment to show a knob (they reach the ranks).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rates="100mbit 300mbit 1gbit 3gbit" models="resnet18 resnet50 mobilenet_v2 transformer"
variants="compute gloo sync p3 lagged ddp_prioccl" hosts=4 reps=3 out=""
train_args=()
while (($#)); do
  case $1 in
    --rates) rates=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --steps | --warmup | --batch | --image) train_args+=("$1" "$2"); shift 2 ;;
    -h | --help) sed -n '/^# Usage:/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "sweep.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
python=/usr/bin/python3
"$python" -c 'import torch, torchvision' 2>/dev/null \
  || { echo "sweep.sh: $python lacks torch or torchvision (scripts/setup.sh installs them)" >&2; exit 1; }
lib=$root/build/libprioccl.so
[[ -e $lib ]] || { echo "sweep.sh: $lib missing: build first (scripts/build.sh)" >&2; exit 1; }
out=${out:-$root/perf/real_training/out-$(date +%Y%m%d-%H%M)}
mkdir -p "$out"
results=$out/results.txt
testbed=$root/perf/testbed.sh
trap '"$testbed" down >/dev/null 2>&1 || true' EXIT
{
  echo "# $(date -u +%FT%TZ) commit $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo +dirty)"
  echo "# hosts=$hosts reps=$reps train.py ${train_args[*]:-(defaults)}; PRIOCCL_* set: $(compgen -e | grep '^PRIOCCL_' | tr '\n' ' ')"
} >>"$results"
export PRIOCCL_LIBRARY=$lib PYTHONPATH=$root/python OMP_NUM_THREADS=1
for rate in $rates; do
  "$testbed" down >/dev/null
  "$testbed" up "$hosts" "$rate" >/dev/null
  for ((rep = 1; rep <= reps; rep++)); do
    for model in $models; do
      for variant in $variants; do
        echo "== $(date +%T) rate=$rate rep=$rep $model $variant"
        line=$(timeout 1800 "$testbed" run -x PRIOCCL_LIBRARY -x PYTHONPATH -x OMP_NUM_THREADS -- \
                 "$python" "$root/perf/real_training/train.py" --model "$model" \
                 --variant "$variant" "${train_args[@]}" --tag "rate=$rate,rep=$rep" 2>"$out/last.err" \
               | grep '^REAL_TRAINING' || true)
        if [[ -z $line ]]; then
          echo "   FAILED (stderr: $out/failed-$rate-$model-$variant-$rep.err)"
          cp "$out/last.err" "$out/failed-$rate-$model-$variant-$rep.err"
          echo "REAL_TRAINING model=$model variant=$variant failed=1 tag=rate=$rate,rep=$rep" >>"$results"
        else
          echo "   $line"
          echo "$line" >>"$results"
        fi
      done
    done
  done
done
"$testbed" down >/dev/null
report_python=python3
python3 -c 'import matplotlib' 2>/dev/null || report_python=$python
"$report_python" "$root/perf/real_training/report.py" "$results" --hosts "$hosts" \
  --md "$out/table.md" --png "$out/sweep.png"
