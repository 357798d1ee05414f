#!/usr/bin/env bash
# The cuda backend on a machine with an NVIDIA GPU, in under 5 minutes:
#   1. the test suite on the cuda backend, on the GPU: every test that runs on the cuda backend
#      (the `backend`-parameterised tests and tests/test_codegen_cuda.py), at full sizes;
#   2. benchmarks/bench_gpu.py: W1, W2, W3 against the copy-bandwidth floor, and JAX and PyTorch
#      on the same GPU where they are installed. The table goes to benchmarks/gpu_results.md
#      (with the test result) and is printed.
#
#   bash benchmarks/gpu_check.sh            on a machine with an NVIDIA GPU
#   bash benchmarks/gpu_check.sh --smoke    anywhere (without a GPU: on Numba's CUDA simulator):
#                                           a few tests and tiny sizes, to check this script
#
# GPU_CHECK_OUT=FILE puts the table elsewhere. The exit status is non-zero if a test failed or
# the benchmark could not run.
set -uo pipefail
cd "$(dirname "$0")/.."

smoke=0
if [ "${1:-}" = "--smoke" ]; then
    smoke=1
elif [ $# -gt 0 ]; then
    echo "usage: bash benchmarks/gpu_check.sh [--smoke]" >&2
    exit 2
fi

if [ $smoke = 0 ]; then
    unset NUMBA_ENABLE_CUDASIM
    if ! python3 -c "from numba import cuda; raise SystemExit(0 if cuda.is_available() else 1)"; then
        echo "gpu_check: no usable NVIDIA GPU here (numba.cuda.is_available() is False);" \
             "run 'tracegrad doctor', or use --smoke to check this script" >&2
        exit 2
    fi
    python3 -c "from numba import cuda; d = cuda.get_current_device(); print('gpu_check: on', d.name, d.compute_capability)"
    files=(tests/test_*.py)
    selection=(-k cuda)
    test_budget=200
    bench_args=()
    out="${GPU_CHECK_OUT:-benchmarks/gpu_results.md}"
else
    files=(tests/test_codegen_cuda.py tests/test_tutorial.py)
    selection=(-k "classic or device_arrays_in or gpu_classic")
    test_budget=120
    bench_args=(--smoke)
    out="${GPU_CHECK_OUT:-${TMPDIR:-/tmp}/tracegrad_gpu_check_smoke.md}"
fi

# Compiling kernels for the GPU is most of the tests' time: one pytest process per test file, in
# parallel (a few at a time per core), all on the one GPU; each without pyproject's addopts (its
# one worker per core through pytest-xdist, which this machine need not have).
start=$(date +%s)
logs=$(mktemp -d)
jobs_max=$(( $(nproc) > 1 ? $(nproc) : 1 ))
echo "gpu_check: 1/2 the tests on the cuda backend, ${#files[@]} files, ${jobs_max} at a time (at most ${test_budget} s)"
for f in "${files[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 0.2; done
    name=$(basename "$f" .py)
    ( TRACEGRAD_TEST_BACKENDS=cuda timeout "$test_budget" \
        python3 -m pytest -o addopts=-ra -q -p no:cacheprovider "$f" "${selection[@]}" \
            >"$logs/$name.log" 2>&1
      echo $? >"$logs/$name.status" ) &
done
wait
test_status=0
passed=0; failed=0; errors=0; skipped=0
for f in "${files[@]}"; do
    name=$(basename "$f" .py)
    status=$(cat "$logs/$name.status")
    last=$(grep -E "(passed|failed|error|no tests ran|deselected)" "$logs/$name.log" | tail -n 1)
    for kind in passed failed skipped; do
        n=$(echo "$last" | grep -oE "[0-9]+ ${kind}" | grep -oE "[0-9]+" || true)
        eval "$kind=\$(( $kind + ${n:-0} ))"
    done
    n=$(echo "$last" | grep -oE "[0-9]+ errors?" | grep -oE "[0-9]+" || true)
    errors=$(( errors + ${n:-0} ))
    case "$status" in
        0|5) ;;  # 5: no cuda test in this file
        124) echo "gpu_check: $f stopped after ${test_budget} s"; test_status=1 ;;
        *) echo "gpu_check: $f failed (exit $status):"; tail -n 30 "$logs/$name.log"; test_status=1 ;;
    esac
done
rm -rf "$logs"
tests_time=$(( $(date +%s) - start ))
summary="${passed} passed, ${failed} failed, ${errors} errors, ${skipped} skipped"
echo "gpu_check: tests: ${summary} in ${tests_time} s"

echo "gpu_check: 2/2 the benchmarks"
timeout 150 python3 benchmarks/bench_gpu.py "${bench_args[@]}" --out "$out" \
    --note "tests on the cuda backend: ${summary} in ${tests_time} s (exit ${test_status})"
bench_status=$?

echo "gpu_check: done in $(( $(date +%s) - start )) s; tests exit ${test_status}, benchmark exit ${bench_status}; table in ${out}"
if [ "$test_status" != 0 ] || [ "$bench_status" != 0 ]; then
    exit 1
fi
