#!/usr/bin/env bash
# Session of 2026-11-24 (afternoon), issue 27 on one H200: the refinement and the warp compiled
# for grids 8 wide (and 6; the warp 4 and 8): the GPU tests of alignment, then
# `xcorr bench align --patches 8x8` and `4x4` (4096 frames of 512x512) and the 8x8 timeline.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/device.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 200 python3 -m pytest -m gpu -q \
  -p no:cacheprovider -n 8 --maxfail=30 tests/alignment > "$OUT/pytest_gpu.txt" 2>&1
tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
for g in 8x8 4x4; do
  timeout 200 python3 -m xcorr_app.cli bench align --patches $g --frames 4096 --size 512x512 \
    > "$OUT/bench_patches_$g.txt" 2>&1
  grep -E "^\| xcorr|^\| rigid|^target" "$OUT/bench_patches_$g.txt"
done
timeout 100 python3 tools/patch_timeline.py 4096 out 8x8 > "$OUT/timeline8.txt" 2>&1
grep -E "^patches|GPU span" "$OUT/timeline8.txt" | head -2
sed -n '/== patches under/,/== rigid under/p' "$OUT/timeline8.txt" | grep -E " ms .*x " | head -8
