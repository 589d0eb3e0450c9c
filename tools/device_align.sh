#!/usr/bin/env bash
# One device call for the align issue: GPU tests, stage probe, xcorr bench align (logs in $OUT).
set -u -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export XCORR_CACHE_DIR=$OUT/cache
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } 2>&1 | tee "$OUT/device.txt"
python3 -m pytest -m gpu -q -n 8 -p no:cacheprovider -p no:benchmark 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -15
python3 tools/align_stage_probe.py 16 2048 2>&1 | tee "$OUT/stages.txt"
python3 -m xcorr_app.cli bench align --force --json "$OUT/bench_align.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_align.txt"
