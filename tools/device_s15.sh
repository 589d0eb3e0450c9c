#!/usr/bin/env bash
# Session of 2026-11-24 (evening), issue 27: the field's x weights read transposed (coalesced):
# the field kernels' GPU tests, the refinement A/B at 8x8 and 4x4, the patch bench at both.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/device.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 200 python3 -m pytest -m gpu -q \
  -p no:cacheprovider -n 8 ${TESTS:-tests/alignment} > "$OUT/pytest_gpu.txt" 2>&1
tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
for g in 8x8 4x4; do
  timeout 100 python3 tools/refine_ab.py 1024 $g 2>&1 | tail -4 | tee "$OUT/refine_ab_$g.txt"
done
for g in ${GRIDS:-8x8 4x4}; do
  timeout 200 python3 -m xcorr_app.cli bench align --patches $g --frames 4096 --size 512x512 \
    > "$OUT/bench_patches_$g.txt" 2>&1
  grep -E "^\| |^target" "$OUT/bench_patches_$g.txt" | grep -v -- "---"
done
timeout 100 python3 tools/patch_timeline.py 4096 out 8x8 > "$OUT/timeline_8x8.txt" 2>&1
grep -E "^patches|^rigid|GPU span" "$OUT/timeline_8x8.txt" | head -4
sed -n '1,60p' "$OUT/timeline_8x8.txt" | grep -E "ms" | head -30
