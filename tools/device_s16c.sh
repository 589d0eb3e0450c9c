#!/usr/bin/env bash
# Session of 2026-11-24 (night), issue 27: the whole GPU suite, the refinement's strips of 1024
# against 2048 floats (tools/refine_ab.py), the patch bench at 8x8 and 4x4 (4096 frames of
# 512x512, with its one-shot rows) and the kernels' timeline at 8x8.
. tools/device_env.sh
gpu_tests
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
for g in 8x8 4x4; do
  for strip in 1024 2048; do
    echo "refine $g strip $strip: $(REFINE_STRIP_FLOATS=$strip timeout 60 python3 tools/refine_ab.py 1024 $g 2>&1 | tail -1)"
  done
done
for g in 8x8 4x4; do bench_patches $g; done
timeout 100 python3 tools/patch_timeline.py 4096 out 8x8 > "$OUT/timeline_8x8.txt" 2>&1
grep -E "^patches|GPU span" "$OUT/timeline_8x8.txt" | head -2
grep -E "ms +[0-9]+x" "$OUT/timeline_8x8.txt" | head -8
