#!/usr/bin/env bash
# Session of 2026-11-25 (2), issue 27: the low flags kept apart (KeptRows.low_flags): the GPU
# tests of alignment/, the 8x8 bench, the host's marks.
. tools/device_env.sh
gpu_tests tests/alignment
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
bench_patches 8x8
timeout 150 python3 tools/host_marks.py 4096 8x8 > "$OUT/marks_8x8.txt" 2>&1
head -3 "$OUT/marks_8x8.txt"; tail -4 "$OUT/marks_8x8.txt"
