#!/usr/bin/env bash
# Session of 2026-11-25 (2), issue 27: the whole GPU suite on the code so far, the 8x8 run's
# idle gaps and what the host did in them (gap_timeline.py, its annotations' GPU twins left
# out now), the 4x4 bench.
. tools/device_env.sh
gpu_tests
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 150 python3 tools/gap_timeline.py 4096 8x8 > "$OUT/gaps_8x8.txt" 2>&1
head -40 "$OUT/gaps_8x8.txt"
bench_patches 4x4
