#!/usr/bin/env bash
# One call on the device machine: compile check, GPU suite, whole suite, and the sample stacks
# aligned by this tree and (when .old/ holds an earlier tree: `git archive REV xcorr_app kernels |
# tar -x -C .old`) by that one, each cold (empty CuPy and tuning caches) then warm, with wall
# times and a byte comparison of shifts.csv.  Logs under $OUT.
# Usage (device tool, carry .whl and .old): bash tools/device_run.sh [pytest args]
set -u -o pipefail
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
fi
# a device whose CuPy cannot start must fail the GPU suite, not skip it
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg XCORR_REQUIRE_GPU=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } 2>&1 | tee "$OUT/device.txt"
python3 -m xcorr_app.cli info 2>&1 | head -5 | tee -a "$OUT/device.txt"

# cold and warm CLI runs first, while the machine's caches are empty
. tools/samples_cold_warm.sh
samples_cold_warm 2>&1 | tee "$OUT/samples.txt"

python3 -m xcorr_app._cuda.compile_check 2>&1 | tail -3 | tee "$OUT/compile_check.txt"
python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 "$@" 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -15
XCORR_REQUIRE_GPU= python3 -m pytest -q -p no:cacheprovider -n 8 -m "not gpu" 2>&1 | tee "$OUT/pytest_cpu.txt" | tail -3
