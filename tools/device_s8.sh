#!/usr/bin/env bash
# Session 8, first call (issue 27): where the GPU-resident patch run spends its time.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
timeout 300 python3 tools/patch_timeline.py 4096 > "$OUT/timeline.txt" 2>&1
head -120 "$OUT/timeline.txt"
