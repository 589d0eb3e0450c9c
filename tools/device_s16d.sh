#!/usr/bin/env bash
# Session of 2026-11-24 (night), issue 27, the session's final code on one H200: the whole GPU
# suite, the patch bench at 8x8 and 4x4 (4096 frames of 512x512, with its one-shot rows, cold
# and warm caches), the refinement a launch (tools/refine_ab.py) and the kernels' timelines.
. tools/device_env.sh
gpu_tests
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
for g in 8x8 4x4; do
  bench_patches $g
  echo "refine $g: $(timeout 60 python3 tools/refine_ab.py 1024 $g 2>&1 | tail -1)"
  timeout 100 python3 tools/patch_timeline.py 4096 out $g > "$OUT/timeline_$g.txt" 2>&1
  grep -E "^patches|GPU span" "$OUT/timeline_$g.txt" | head -2
done
timeout 100 python3 tools/gap_timeline.py 4096 8x8 > "$OUT/gap_8x8.txt" 2>&1
sed -n '/^GPU span/,/host annotations/p' "$OUT/gap_8x8.txt" | head -3
