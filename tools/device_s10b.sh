#!/usr/bin/env bash
# Session of 2026-11-23 (sixth), issue 27: the host in/out stages and `xcorr bench align
# --patches 4x4` (4096 frames of 512x512), then the GPU-resident timeline.  Logs under $OUT.
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 200 python3 tools/host_stage_probe.py 4096 > "$OUT/host_stage.txt" 2>&1
head -11 "$OUT/host_stage.txt"
timeout 200 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
tail -14 "$OUT/bench_patches.txt"
timeout 150 python3 tools/patch_timeline.py 4096 > "$OUT/timeline.txt" 2>&1
head -2 "$OUT/timeline.txt"; grep -A30 "^== patches" "$OUT/timeline.txt" | head -32
