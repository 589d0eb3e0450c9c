#!/usr/bin/env bash
# Session of 2026-11-25 (2), issue 27: the host's marks of a warm 8x8 GPU-resident run
# (host_marks.py, no profiler) and the 8x8 bench on another machine.
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/device.txt"
timeout 150 python3 tools/host_marks.py 4096 8x8 > "$OUT/marks_8x8.txt" 2>&1
cat "$OUT/marks_8x8.txt"
bench_patches 8x8
