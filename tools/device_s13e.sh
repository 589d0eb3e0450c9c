#!/usr/bin/env bash
# Session of 2026-11-24, issue 27: `xcorr bench align --patches 8x8` (64-px patches, the issue's
# other end) on one H200, the final code.  Logs under $OUT.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name --format=csv,noheader; } | tee "$OUT/device.txt"
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 240 python3 -m xcorr_app.cli bench align --patches 8x8 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches8.txt" 2>&1
tail -12 "$OUT/bench_patches8.txt"
