#!/usr/bin/env bash
# Runs every GPU check of prioccl's GPU kit (scripts/gpu-kit.sh packs it) and writes
# OUTDIR/gpu-report.md, OUTDIR/gpu-figures.json and each check's log.
#   run.sh OUTDIR           on the GPU machine: real CUDA memory, the CUDA kernels, NCCL
#   run.sh OUTDIR --cpu     on a machine without a GPU: the same flow on the fake device (the GPU
#                           checks then skip, saying why), so the kit cannot rot between GPU runs
# Needs nothing outside the kit but the machine's C/C++ runtime, and on a GPU machine its CUDA
# runtime, NCCL and a python3 with a CUDA torch. Exit status: 1 when any check failed.
set -uo pipefail
kit=$(cd "$(dirname "$0")" && pwd)
case ${1:-} in
  -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  '' | -*) echo "usage: run.sh OUTDIR [--cpu]" >&2; exit 2 ;;
esac
out=$1
cpu=0
[[ ${2:-} == --cpu ]] && cpu=1
mkdir -p "$out"
out=$(cd "$out" && pwd)
start=$(date +%s)

# The kit's Open MPI, relocated; its libraries before any the machine has.
export OPAL_PREFIX=$kit/ompi PMIX_INSTALL_PREFIX=$kit/pmix
export OMPI_MCA_mca_base_param_files=$kit/ompi/etc/openmpi-mca-params.conf
export PATH=$kit/ompi/bin:$kit/bin:$PATH
export LD_LIBRARY_PATH=$kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export PRIOCCL_LIBRARY=$kit/lib/libprioccl.so PYTHONPATH=$kit/python:$kit/tests
export PYTHONUNBUFFERED=1 GTEST_COLOR=no PMIX_MCA_pcompress_base_silence_warning=1
mpirun=("$kit/ompi/bin/mpirun" --oversubscribe --bind-to none)
python=${PYTHON:-python3}

results=()  # "name|status|seconds|note"
# check NAME TIMEOUT_S [VAR=VALUE...] -- COMMAND...: runs one check into OUTDIR/NAME.log.
# 0: pass; 77 or a "no usable GPU"/"SKIPPED" line: skipped; else failed.
check() {
  local name=$1 limit=$2
  shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local log=$out/$name.log t0 rc status note
  t0=$(date +%s.%N)
  env "${envs[@]}" timeout -k 10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  local secs
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  if [[ $rc == 0 || $rc == 77 ]] && grep -qE 'no usable GPU|^SKIPPED' "$log" &&
     ! grep -qE '^\[  PASSED  \] [1-9]' "$log"; then
    status=skipped
    note=$(grep -m1 -oE '(no usable GPU|SKIPPED)[^"]*' "$log")
  elif [[ $rc == 0 ]]; then
    status=pass
    note=$(grep -m1 -E '^\[  PASSED  \]|checks passed|^RESULT|OK' "$log")
  elif [[ $rc == 124 || $rc == 137 ]]; then
    status=FAIL
    note="timed out after ${limit}s"
  else
    status=FAIL
    note="exit $rc: $(grep -m1 -E 'FAIL|Error|error|refused|abort' "$log")"
  fi
  note=${note//|//}
  results+=("$name|$status|$secs|${note:0:160}")
  echo "[$status] $name (${secs}s) ${note:0:120}"
}

# The environment, for the report.
{
  echo "date: $(date -u +%FT%TZ)"
  echo "kit commit: $(cat "$kit/COMMIT")"
  echo "host: $(uname -srm); $(. /etc/os-release 2>/dev/null; echo "$PRETTY_NAME")"
  command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu: /'
  echo "open mpi (kit): $("$kit/ompi/bin/mpirun" --version 2>&1 | head -1)"
  "$python" - <<'EOF' 2>&1
import sys
print("python:", sys.version.split()[0], sys.executable)
try:
    import torch
    print("torch:", torch.__version__, "cuda", torch.version.cuda, "available",
          torch.cuda.is_available(),
          "nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-")
except Exception as e:
    print("torch: none (%s)" % e)
EOF
  ldconfig -p 2>/dev/null | grep -E 'libnccl\.so\.2 |libcudart\.so\.13 |libcuda\.so\.1 ' | sed 's/^\s*/lib: /'
} >"$out/environment.txt"
cat "$out/environment.txt"

devenv=PRIOCCL_TEST_DEVICE=cuda
((cpu)) && devenv=PRIOCCL_TEST_DEVICE=fake

# 1. The CUDA reduction kernels against the host loops, bitwise.
check reduce_kernels 120 X=1 -- test_reduce_kernels
# 2. Device buffers over every host transport (staged through pinned memory), several ranks
#    sharing the GPU.
check device_buffers.mpi.np1 180 $devenv PRIOCCL_TRANSPORT=mpi -- "${mpirun[@]}" -np 1 test_device_buffers
check device_buffers.mpi.np2 180 $devenv PRIOCCL_TRANSPORT=mpi -- "${mpirun[@]}" -np 2 test_device_buffers
check device_buffers.mpi.np3 240 $devenv PRIOCCL_TRANSPORT=mpi -- "${mpirun[@]}" -np 3 test_device_buffers
check device_buffers.ucx_tcp.np2 180 $devenv PRIOCCL_TRANSPORT=ucx UCX_TLS=tcp -- "${mpirun[@]}" -np 2 test_device_buffers
check device_buffers.ucx_sm.np2 180 $devenv PRIOCCL_TRANSPORT=ucx UCX_TLS=sm,self -- "${mpirun[@]}" -np 2 test_device_buffers
check device_buffers.mpi_coll.np2 180 $devenv PRIOCCL_TRANSPORT=mpi-coll -- "${mpirun[@]}" -np 2 test_device_buffers
check device_buffers.tcp.np2 180 $devenv PRIOCCL_TRANSPORT=tcp -- "${mpirun[@]}" -np 2 test_device_buffers
#    One rank without a GPU (CUDA_VISIBLE_DEVICES empty): every rank must skip alike, none left
#    waiting in creation for the rank that skipped.
if ((cpu)); then
  results+=("device_buffers.one_rank_without_gpu.np2|skipped|0|no usable GPU: --cpu")
else
  check device_buffers.one_rank_without_gpu.np2 90 PRIOCCL_TEST_DEVICE=cuda -- bash -c '
    "$@" >"$0" 2>&1
    rc=$?
    grep -E "no usable GPU" "$0" | sed "s/no usable GPU/no-GPU skip/g" | sort | uniq -c
    [[ $rc == 0 ]] && grep -q "another rank has no usable GPU" "$0" && echo "OK: every rank skipped alike"
  ' "$out/one_rank_without_gpu.mpirun.log" "${mpirun[@]}" -np 1 test_device_buffers : -np 1 env CUDA_VISIBLE_DEVICES= test_device_buffers
fi
# 3. The NCCL backend: one rank per GPU; then two ranks on one GPU, which NCCL may refuse.
check nccl_backend.np1 180 X=1 -- "${mpirun[@]}" -np 1 test_nccl_backend
check nccl_backend.np2_one_gpu 180 PRIOCCL_TEST_NCCL_SHARE_GPU=1 -- "${mpirun[@]}" -np 2 test_nccl_backend
# 4. Speed against plain NCCL in the same run: bandwidth and an urgent op under a large one.
check gpu_perf.nccl.np1 240 X=1 -- "${mpirun[@]}" -np 1 gpu_perf --transport nccl --json "$out/gpu_perf.nccl.np1.json"
#    Staged device buffers over the host transports, two ranks sharing the GPU: against the same
#    op on host buffers (what staging costs).
check gpu_perf.mpi.np2 180 X=1 -- "${mpirun[@]}" -np 2 gpu_perf --transport mpi -e 67108864 --json "$out/gpu_perf.mpi.np2.json"
check gpu_perf.ucx.np2 180 UCX_TLS=sm,self -- "${mpirun[@]}" -np 2 gpu_perf --transport ucx -e 67108864 --json "$out/gpu_perf.ucx.np2.json"
check gpu_perf.tcp.np2 180 X=1 -- "${mpirun[@]}" -np 2 gpu_perf --transport tcp -e 67108864 --json "$out/gpu_perf.tcp.np2.json"
# 5. CUDA tensors through the Python package with this machine's torch.
pyenv=X=1
((cpu)) && pyenv=PRIOCCL_TEST_ON_CPU=1
check python_cuda.mpi.np1 180 $pyenv PRIOCCL_TRANSPORT=mpi -- "${mpirun[@]}" -np 1 "$python" "$kit/tests/test_python_cuda.py"
check python_cuda.mpi.np2 180 $pyenv PRIOCCL_TRANSPORT=mpi -- "${mpirun[@]}" -np 2 "$python" "$kit/tests/test_python_cuda.py"
check python_cuda.tcp.np2 180 $pyenv PRIOCCL_TRANSPORT=tcp -- "${mpirun[@]}" -np 2 "$python" "$kit/tests/test_python_cuda.py"
if ((cpu)); then
  results+=("python_cuda.nccl.np1|skipped|0|no usable GPU: --cpu (NCCL needs a GPU)")
else
  check python_cuda.nccl.np1 180 PRIOCCL_TRANSPORT=nccl -- "${mpirun[@]}" -np 1 "$python" "$kit/tests/test_python_cuda.py"
fi

# The report.
failed=0 passed=0 skipped=0
for r in "${results[@]}"; do
  case $(cut -d'|' -f2 <<<"$r") in
    pass) passed=$((passed + 1)) ;; skipped) skipped=$((skipped + 1)) ;; *) failed=$((failed + 1)) ;;
  esac
done
{
  echo "# prioccl GPU kit report"
  echo
  echo "Mode: $( ((cpu)) && echo "--cpu (fake device; GPU checks skip)" || echo "GPU")." \
       "$passed passed, $skipped skipped, $failed failed, $(($(date +%s) - start)) s."
  echo
  echo '```'
  cat "$out/environment.txt"
  echo '```'
  echo
  echo "| check | result | s | note |"
  echo "|---|---|---|---|"
  for r in "${results[@]}"; do
    IFS='|' read -r n s t note <<<"$r"
    echo "| $n | $s | $t | ${note//|//} |"
  done
  for f in "$out"/gpu_perf.*.log; do
    [[ -f $f ]] || continue
    echo
    echo "## $(basename "$f" .log)"
    echo
    echo '```'
    cat "$f"
    echo '```'
  done
} >"$out/gpu-report.md"
{
  echo "{\"mode\": \"$( ((cpu)) && echo cpu || echo gpu)\", \"commit\": \"$(cat "$kit/COMMIT")\","
  echo " \"passed\": $passed, \"skipped\": $skipped, \"failed\": $failed, \"checks\": ["
  sep=""
  for r in "${results[@]}"; do
    IFS='|' read -r n s t note <<<"$r"
    note=${note//\\/\\\\}
    printf '%s  {"name": "%s", "result": "%s", "seconds": %s, "note": "%s"}' "$sep" "$n" "$s" "$t" "${note//\"/\'}"
    sep=$',\n'
  done
  echo
  echo " ],"
  printf ' "gpu_perf": '
  sep="{"
  for f in "$out"/gpu_perf.*.json; do
    [[ -s $f ]] || continue
    printf '%s"%s": ' "$sep" "$(basename "$f" .json)"
    cat "$f"
    sep=", "
  done
  [[ $sep == "{" ]] && echo null || echo "}"
  echo "}"
} >"$out/gpu-figures.json"
echo "gpu-kit: $passed passed, $skipped skipped, $failed failed; report in $out/gpu-report.md"
((failed == 0))
