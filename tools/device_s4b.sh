#!/usr/bin/env bash
# Session of 2026-11-23: the helpers' GPU benches (plans24: the few-pair kernel and the planner;
# gpu27: the patch pass), after tools/device_s4.sh has run in this call.  Logs under $OUT.
set -u -o pipefail
OUT=${OUT:-/tmp/out}
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 150 python3 -m xcorr_app.cli bench xcorr --only one_to_one --explain > "$OUT/bench_small.txt" 2>&1
timeout 60 python3 -m xcorr_app.cli bench xcorr --only 1x8 --explain >> "$OUT/bench_small.txt" 2>&1
tail -45 "$OUT/bench_small.txt"
timeout 120 python3 -m xcorr_app.cli bench align --patches 4x4 --quick > "$OUT/bench_patches.txt" 2>&1; tail -25 "$OUT/bench_patches.txt"
