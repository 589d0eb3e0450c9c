#!/usr/bin/env bash
# Session of 2026-11-24 (night), issue 27: the GPU tests of TESTS (default alignment and
# registration), the patch bench at GRIDS (default 8x8) and the kernels' timeline at the first.
. tools/device_env.sh
gpu_tests ${TESTS:-tests/alignment tests/registration}
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
GRIDS=${GRIDS:-8x8}
for g in $GRIDS; do bench_patches $g; done
g=${GRIDS%% *}
timeout 100 python3 tools/patch_timeline.py 4096 out $g > "$OUT/timeline_$g.txt" 2>&1
grep -E "^patches|GPU span" "$OUT/timeline_$g.txt" | head -2
grep -E "ms +[0-9]+x" "$OUT/timeline_$g.txt" | head -16
timeout 100 python3 tools/gap_timeline.py 4096 $g > "$OUT/gap_$g.txt" 2>&1
sed -n '/^GPU span/,/host annotations/p' "$OUT/gap_$g.txt" | head -14
