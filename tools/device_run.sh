#!/usr/bin/env bash
# One call on the device machine: GPU test suite, whole test suite, compile check, a timing.
# Usage (device tool): bash tools/device_run.sh   (logs under $OUT)
set -u -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } 2>&1 | tee "$OUT/device.txt"
python3 -m xcorr_app.cli info 2>&1 | tee -a "$OUT/device.txt"
python3 -m xcorr_app._cuda.compile_check --verbose 2>&1 | tee "$OUT/compile_check.txt"
python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -5
python3 -m pytest -q -p no:cacheprovider -x -n 8 2>&1 | tee "$OUT/pytest_all.txt" | tail -5
if [ -f tools/device_extra.py ]; then python3 tools/device_extra.py 2>&1 | tee "$OUT/extra.txt"; fi
