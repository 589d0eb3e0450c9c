#!/usr/bin/env bash
# Session of 2026-11-24 (ninth), issue 27: where the GPU-resident patch run stands on the
# target's device (one H200): `xcorr bench align --patches 4x4`, then the kernel timeline.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; } | tee "$OUT/device.txt"
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 200 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
tail -13 "$OUT/bench_patches.txt"
timeout 200 python3 tools/patch_timeline.py > "$OUT/timeline.txt" 2>&1
grep -E "^patches|^rigid|under the profiler|GPU span| ms .*x " "$OUT/timeline.txt" | head -70
