#!/usr/bin/env bash
# Session of 2026-11-24 (afternoon), issue 27 on one H200: the GPU tests (SUITE=all: the whole
# suite, else tests/alignment and tests/filters), `xcorr bench align --patches 4x4` (4096
# frames of 512x512) and the timeline with out=.  Logs under $OUT.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/device.txt"
tests="tests/alignment tests/filters"; [ "${SUITE:-}" = all ] && tests=""
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 250 python3 -m pytest -m gpu -q \
  -p no:cacheprovider -n 8 --maxfail=30 $tests > "$OUT/pytest_gpu.txt" 2>&1
tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 200 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
grep -E "^\| xcorr|^\| rigid|^target" "$OUT/bench_patches.txt"
timeout 100 python3 tools/patch_timeline.py 4096 out > "$OUT/timeline.txt" 2>&1
grep -E "^patches|^rigid|GPU span" "$OUT/timeline.txt" | head -4
sed -n '/== patches under/,/== rigid under/p' "$OUT/timeline.txt" | grep -E " ms .*x " | head -24
