#!/usr/bin/env bash
# Session of 2026-11-25 (2), issue 27: the host's marks of a warm 8x8 GPU-resident run with
# Python's garbage collections (host_marks.py).
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 150 python3 tools/host_marks.py 4096 8x8 > "$OUT/marks_8x8.txt" 2>&1
cat "$OUT/marks_8x8.txt"
