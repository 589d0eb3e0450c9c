#!/usr/bin/env bash
# Session of 2026-11-24, issue 27, the session's final code on one H200: the whole GPU suite,
# `xcorr bench align --patches 4x4` and `8x8` (4096 frames of 512x512), the timeline with
# out=.  Logs under $OUT.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/device.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 --maxfail=30 > "$OUT/pytest_gpu.txt" 2>&1; tail -1 "$OUT/pytest_gpu.txt"
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head; grep -B40 "short test summary" "$OUT/pytest_gpu.txt" | head -80 > "$OUT/failures.txt"
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 200 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
tail -12 "$OUT/bench_patches.txt"
timeout 150 python3 -m xcorr_app.cli bench align --patches 8x8 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches8.txt" 2>&1
grep -E "^\| xcorr|^\| rigid|^\| per-patch|^\| one-shot" "$OUT/bench_patches8.txt"
timeout 100 python3 tools/patch_timeline.py 4096 out > "$OUT/timeline.txt" 2>&1
grep -E "^patches|^rigid|under the profiler|GPU span| ms .*x " "$OUT/timeline.txt" | head -16
