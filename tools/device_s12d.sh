#!/usr/bin/env bash
# Session of 2026-11-23 (eighth), issue 27, the final code: the GPU suite, then
# `xcorr bench align --patches 4x4` on 4096 frames of 512x512 (128-px patches).  Logs under $OUT.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } | tee "$OUT/device.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 --maxfail=30 > "$OUT/pytest_gpu.txt" 2>&1; tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head
grep -B30 "short test summary" "$OUT/pytest_gpu.txt" | head -60 > "$OUT/failures.txt"
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 190 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
tail -13 "$OUT/bench_patches.txt"
