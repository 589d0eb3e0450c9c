#!/usr/bin/env bash
# Session of 2026-11-24 (evening), issue 27: the alignment GPU tests, the patch bench at the
# grids given (GRIDS, default 8x8) and the annotated gaps at the first of them.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/device.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 280 python3 -m pytest -m gpu -q \
  -p no:cacheprovider -n 8 --durations=12 -rf ${TESTS:-tests/alignment} > "$OUT/pytest_gpu.txt" 2>&1
tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
GRIDS=${GRIDS:-8x8}
for g in $GRIDS; do
  timeout 200 python3 -m xcorr_app.cli bench align --patches $g --frames 4096 --size 512x512 \
    > "$OUT/bench_patches_$g.txt" 2>&1
  grep -E "^\| |^target" "$OUT/bench_patches_$g.txt" | grep -v -- "---"
done
g=${GRIDS%% *}
timeout 100 python3 tools/gap_timeline.py 4096 $g > "$OUT/gap_$g.txt" 2>&1
sed -n '/^GPU span/,/host annotations/p' "$OUT/gap_$g.txt"
for g in ${REFINE_AB:-}; do
  timeout 60 python3 tools/refine_ab.py 1024 $g 2>&1 | tail -2
done
