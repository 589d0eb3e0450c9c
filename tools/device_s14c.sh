#!/usr/bin/env bash
# Session of 2026-11-24 (afternoon), issue 27, the session's final code on one H200: the whole
# GPU suite, `xcorr bench align --patches 4x4` and `8x8` (4096 frames of 512x512; each with its
# one-shot rows, cold and warm caches), the 4x4 timeline with out= and the annotated gaps.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/device.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 250 python3 -m pytest -m gpu -q \
  -p no:cacheprovider -n 8 --maxfail=30 > "$OUT/pytest_gpu.txt" 2>&1
tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
for g in 4x4 8x8; do
  timeout 200 python3 -m xcorr_app.cli bench align --patches $g --frames 4096 --size 512x512 \
    > "$OUT/bench_patches_$g.txt" 2>&1
  grep -E "^\| |^target" "$OUT/bench_patches_$g.txt" | grep -v -- "---"
done
timeout 100 python3 tools/patch_timeline.py 4096 out > "$OUT/timeline.txt" 2>&1
grep -E "^patches|^rigid|GPU span" "$OUT/timeline.txt" | head -4
timeout 100 python3 tools/gap_timeline.py 4096 > "$OUT/gap.txt" 2>&1
sed -n '/^GPU span/,/host annotations/p' "$OUT/gap.txt"
