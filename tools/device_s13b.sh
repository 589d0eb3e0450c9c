#!/usr/bin/env bash
# Session of 2026-11-24, issue 27: the warp-per-result patch search (band_xcorr.cu): its GPU
# tests and the patch pass's, the probe against the planner's best, the bench.  Logs under $OUT.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name --format=csv,noheader; } | tee "$OUT/device.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 tests/correlate/test_gpu_band.py tests/alignment > "$OUT/pytest_band.txt" 2>&1; tail -1 "$OUT/pytest_band.txt"
grep -E "^FAILED|^ERROR" "$OUT/pytest_band.txt" | head; grep -B40 "short test summary" "$OUT/pytest_band.txt" | head -80 > "$OUT/failures.txt"
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 120 python3 tools/band_probe.py 2>&1 | tee "$OUT/band_probe.txt" | tail -12
timeout 200 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
tail -12 "$OUT/bench_patches.txt" | head -6
