#!/usr/bin/env bash
# Session of 2026-11-23, third call: the kernels that ship built, cold and warm runs
# (tools/device_s4.sh), the planner's calibration data on the small pipeline problems (the
# few-pair kernel), and the patch bench on 1024 frames.  Logs under $OUT.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash tools/device_s4.sh 2>&1 | tail -40
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 200 python3 tools/planner_data.py --only "${PLANNER_ONLY:-one_to_one}" > /tmp/pd.log 2>&1; tail -3 /tmp/pd.log
timeout 150 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 1024 --size 512x512 > "$OUT/bench_patches.txt" 2>&1; tail -22 "$OUT/bench_patches.txt"
