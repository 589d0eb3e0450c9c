#!/usr/bin/env bash
# Session of 2026-11-23 (eighth), issue 27, third call: Nsight Compute on one launch of the new
# refinement, the GPU-resident run's timeline (kernels by time).  Logs under $OUT.
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } | tee "$OUT/device.txt"
timeout 120 bash tools/ncu_refine.sh > "$OUT/ncu.txt" 2>&1; tail -30 "$OUT/ncu.txt"
timeout 200 python3 tools/patch_timeline.py 4096 > "$OUT/timeline.txt" 2>&1; head -70 "$OUT/timeline.txt"
