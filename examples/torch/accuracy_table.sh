#!/usr/bin/env bash
# Test accuracy on scikit-learn's digits after a fixed budget, per DistributedOptimizer mode,
# mean ± std over seeds, 4 ranks. Usage: examples/torch/accuracy_table.sh [SEEDS] [EPOCHS] [MODES]
# (defaults: 3 seeds, 20 epochs, "sync p3 lagged lagged-tricks delayed:1 ... delayed:5").
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# EXTRA: more arguments for every run (e.g. EXTRA="--lr 0.01").
seeds=${1:-3} epochs=${2:-20} EXTRA=${EXTRA:-}
modes=${3:-"sync p3 lagged lagged-tricks delayed:1 delayed:2 delayed:3 delayed:4 delayed:5"}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for mode in $modes; do
  script=digits.py args=(--mode "$mode")
  [[ $mode == delayed:* ]] && args=(--mode delayed --k "${mode#delayed:}")
  [[ $mode == pipeline-* ]] && script=pipeline_digits.py args=(--variant "${mode#pipeline-}")
  for ((seed = 0; seed < seeds; seed++)); do
    echo "[accuracy] $mode seed $seed" >&2
    PYTHONPATH="$root/python" "$root/scripts/mpirun-local" -np 4 /usr/bin/python3 \
      "$root/examples/torch/$script" "${args[@]}" --seed "$seed" --epochs "$epochs" $EXTRA \
      | grep '^RESULT' | tee -a "$out" >&2
  done
done
/usr/bin/python3 - "$out" <<'PY'
import statistics, sys
rows = [dict(kv.split("=", 1) for kv in line.split()[1:]) for line in open(sys.argv[1])]
print("| mode | runs | test accuracy (mean ± std) | identical weights on all ranks |")
print("|---|---:|---:|---|")
for mode in dict.fromkeys(r["mode"] for r in rows):
    accs = [float(r["test_accuracy"]) for r in rows if r["mode"] == mode]
    flags = [r.get("identical_weights") for r in rows if r["mode"] == mode]
    same = "n/a (one stage per rank)" if None in flags else "yes" if all(f == "1" for f in flags) else "NO"
    sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
    print(f"| {mode} | {len(accs)} | {100 * statistics.mean(accs):.2f} ± {100 * sd:.2f} % | "
          f"{same} |")
PY
